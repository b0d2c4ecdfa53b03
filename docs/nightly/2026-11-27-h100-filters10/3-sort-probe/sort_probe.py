"""How long tl.sort of N int64 keys takes in one program (latency), to judge a sort-based cut of the gathered
tokens: each program sorts R times in a loop; (t(R) - t(0)) / R is one sort's latency."""
import torch, triton, triton.language as tl

NONE = tl.constexpr(-9223372036854775808)

@triton.jit
def _k(buf_ptr, n_ptr, out_ptr, target, R, N: tl.constexpr, CUM: tl.constexpr):
    row = tl.program_id(0)
    n = tl.load(n_ptr + row)
    i = tl.arange(0, N)
    x = tl.load(buf_ptr + row * N + i, mask=i < n, other=NONE)
    for r in range(R):
        x = tl.sort(x, descending=True)
        x = x ^ (r & 1)
    if CUM:
        w = tl.where(x != NONE, (x >> 32) & 65535, 0)
        c = tl.cumsum(w, 0)
        pos = tl.sum((c < target).to(tl.int32), axis=0)
        tl.store(out_ptr + row, tl.sum(tl.where(i == pos, x, 0), axis=0))
    else:
        tl.store(out_ptr + row, tl.sum(x, axis=0))

def time_it(fn, iters=200):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(15):
        a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000 / 20)
    return sorted(ts)[len(ts) // 2]

for rows in (5, 640):
    for N in (512, 1024, 2048, 4096):
        for warps in (4, 8, 16):
            buf = torch.randint(-2**62, 2**62, (rows * N,), device="cuda", dtype=torch.int64)
            n = torch.full((rows,), N, device="cuda", dtype=torch.int32)
            out = torch.empty(rows, device="cuda", dtype=torch.int64)
            t = {}
            for R in (0, 1, 8):
                t[R] = time_it(lambda: _k[(rows,)](buf, n, out, 1 << 20, R, N=N, CUM=True, num_warps=warps))
            print(f"rows {rows:4d} N {N:5d} warps {warps:2d}: launch+load+cumsum {t[0]:6.2f} us, "
                  f"one sort {t[1]-t[0]:6.2f} us, per sort of 8 {(t[8]-t[0])/8:6.2f} us", flush=True)
