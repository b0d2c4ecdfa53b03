"""Host time from a B = 1 call's start to its first launch (the critical path before the GPU starts), launches
stubbed out, TRITON_INTERPRET=1: the filtered call's against the unfiltered one's, median of many."""
import sys, time, statistics, torch
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
from specverify.kernels import triton_filter, triton_sampler, triton_kernels
from reference import SpecBatch
first = []
def stub(*a, **k):
    if not first:
        first.append(time.perf_counter())
triton_sampler.launch = stub
triton_kernels.launch = stub
B, K, V = 1, 4, 151936
logits = torch.randn(B * (K + 1), V)
q = torch.full((K, V), 1.0 / V)
batch = SpecBatch(torch.tensor([K]), torch.zeros(K, dtype=torch.int64), logits, q, torch.ones(B),
                  torch.tensor([50]), torch.tensor([0.9]), torch.tensor([0.1]))
tok = torch.empty((B, K + 1), dtype=torch.int64); acc = torch.empty(B, dtype=torch.int64)
u = torch.rand(K); e = torch.rand(B, V)
kw = dict(uniform=u, exponential=e)
un = lambda: triton_kernels.triton_sample_into(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, **kw)
fi = lambda: triton_sampler.filtered_sample_into(tok, acc, batch, **kw)
def t(f, n=20000):
    out = []
    for i in range(n + 500):
        first.clear()
        s = time.perf_counter()
        f()
        if i >= 500:
            out.append(first[0] - s)
    return statistics.median(out) * 1e6
for _ in range(3):
    print(f"to the first launch: unfiltered {t(un):.2f} us, filtered {t(fi):.2f} us")
s = triton_sampler.cut_splits(batch.top_k, tok, logits)
real_cs = triton_sampler.cut_splits
triton_sampler.cut_splits = lambda *a: s
print(f"cut_splits memoised: filtered {t(fi):.2f} us")
real = triton_sampler.cut_launches
memo = {}
def fake(*a):
    r = memo.get(1)
    if r is None:
        r = memo[1] = real(*a)
    return r
triton_sampler.cut_launches = fake
print(f"and cut_launches memoised: filtered {t(fi):.2f} us")
real_l = triton_sampler.launches
lm = {}
def fake_l(*a, **k):
    r = lm.get(1)
    if r is None:
        r = lm[1] = real_l(*a, **k)
    return r
triton_sampler.launches = fake_l
print(f"and launches memoised: filtered {t(fi):.2f} us")
