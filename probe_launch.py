import inspect, time, torch, triton
import triton.compiler.compiler as cc
from triton import knobs
from triton.runtime.driver import driver
print(inspect.getsource(cc.CompiledKernel.__getitem__))
print(inspect.getsource(cc.CompiledKernel.launch_metadata))
print("enter hook", knobs.runtime.launch_enter_hook, "exit", knobs.runtime.launch_exit_hook)
from specverify.kernels.triton_sampler import launches, launch, _compiled
B, K, V = 1, 4, 151936
dev = "cuda"
tok = torch.empty(B, K+1, dtype=torch.int64, device=dev); na = torch.empty(B, dtype=torch.int64, device=dev)
nd = torch.full((B,), K, device=dev); d = torch.zeros(B*K, dtype=torch.int64, device=dev)
l = torch.randn(B*(K+1), V, device=dev); q = torch.rand(B*K, V, device=dev)
t = torch.ones(B, device=dev); u = torch.rand(B*K, device=dev); e = torch.rand(B, V, device=dev) + 0.1
L = launches(tok, na, nd, d, l, q, t, uniform=u, exponential=e)
for step in L: launch(*step)
for step in L: launch(*step)
torch.cuda.synchronize()
comp = [_compiled[step[4]] for step in L]
full = [(c, step[1], step[2] + ce) for (c, ce), step in zip(comp, L)]
stream = driver.active.get_current_stream(torch.cuda.current_device())
def wall(fn, n=2000):
    for _ in range(50): fn()
    torch.cuda.synchronize()
    best = 1e9
    for r in range(5):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        t1 = time.perf_counter(); torch.cuda.synchronize()
        best = min(best, (t1 - t0) / n * 1e6)
    return best
steps = {
 "launches()": lambda: launches(tok, na, nd, d, l, q, t, uniform=u, exponential=e),
 "runner x2": lambda: [c[g](*a) for c, g, a in full],
 "run x2 (meta None)": lambda: [c.run(g[0], g[1], g[2], stream, c.function, c.packed_metadata, None, None, None, *a) for c, g, a in full],
 "run x2 (meta+hooks)": lambda: [c.run(g[0], g[1], g[2], stream, c.function, c.packed_metadata, c.launch_metadata(g, stream, *a), knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *a) for c, g, a in full],
 "get_current_device": lambda: torch.cuda.current_device(),
 "get_current_stream": lambda: driver.active.get_current_stream(0),
 "torch.empty": lambda: torch.empty(100, dtype=torch.int64, device=dev),
 "launch() x2 fast": lambda: [launch(*s) for s in L],
}
for k, f in steps.items():
    print(f"{k:24s} {wall(f):8.2f} us")
