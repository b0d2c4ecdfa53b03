import sys, time, torch
sys.path.insert(0, ".")
from specverify.kernels import triton_filter, triton_sampler, triton_kernels
from reference import SpecBatch
triton_sampler.launch = lambda *a, **k: None
triton_kernels.launch = lambda *a, **k: None
B, K, V = 1, 4, 151936
logits = torch.randn(B * (K + 1), V)
q = torch.full((K, V), 1.0 / V)
batch = SpecBatch(torch.tensor([K]), torch.zeros(K, dtype=torch.int64), logits, q, torch.ones(B),
                  torch.tensor([50]), torch.tensor([0.9]), torch.tensor([0.1]))
tok = torch.empty((B, K + 1), dtype=torch.int64); acc = torch.empty(B, dtype=torch.int64)
u = torch.rand(K); e = torch.rand(B, V)
kw = dict(uniform=u, exponential=e)
def t(f, n=20000):
    for _ in range(200): f()
    r = []
    for _ in range(7):
        s = time.perf_counter()
        for _ in range(n): f()
        r.append((time.perf_counter() - s) / n * 1e6)
    return min(r)
un = lambda: triton_kernels.triton_sample_into(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, **kw)
fi = lambda: triton_sampler.filtered_sample_into(tok, acc, batch, **kw)
print("unfiltered", t(un)); print("filtered", t(fi))
real = triton_sampler.cut_launches
memo = {}
def fake(*a):
    r = memo.get(1)
    if r is None:
        r = memo[1] = real(*a)
    return r
triton_sampler.cut_launches = fake
print("filtered, cut_launches memo", t(fi))
s = triton_sampler.cut_splits(batch.top_k, *tok.shape, V, logits.device)
real_cs = triton_sampler.cut_splits
triton_sampler.cut_splits = lambda *a: s
print("and cut_splits memo", t(fi))
