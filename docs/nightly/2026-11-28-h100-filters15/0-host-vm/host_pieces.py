import sys, time, torch
sys.path.insert(0, ".")
from specverify.kernels import triton_filter, triton_sampler, triton_kernels
from specverify.kernels.triton_kernels import launches
from specverify.kernels.triton_chain import with_cut
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
    best = []
    for r in range(5):
        s = time.perf_counter()
        for _ in range(n): f()
        best.append((time.perf_counter() - s) / n * 1e6)
    return min(best)
splits = triton_sampler.cut_splits(batch.top_k, *tok.shape, V, logits.device)
steps = launches(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, splits=splits, **kw)
cut, record = triton_filter.cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p, steps[-1])
rows = [
 ("unfiltered call", lambda: triton_kernels.triton_sample_into(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, **kw)),
 ("filtered call", lambda: triton_sampler.filtered_sample_into(tok, acc, batch, **kw)),
 ("launches (unfiltered splits)", lambda: launches(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, **kw)),
 ("launches (cut splits)", lambda: launches(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, splits=splits, **kw)),
 ("cut_splits", lambda: triton_sampler.cut_splits(batch.top_k, *tok.shape, V, logits.device)),
 ("cut_launches", lambda: triton_filter.cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p, steps[-1])),
 ("_settings", triton_filter._settings),
 ("with_cut", lambda: with_cut(steps[-1], record)),
 ("batch attrs", lambda: (batch.target_logits, batch.num_draft_tokens, batch.draft_token_ids, batch.draft_probs, batch.temperature, batch.top_k, batch.top_p, batch.min_p)),
]
for name, f in rows:
    print(f"{name:32s} {t(f):7.2f} us")
print("---")
print(f"{'_cut':32s} {t(lambda: triton_sampler._cut(batch, tok, acc, lazy=True, **kw)):7.2f} us")
print(f"{'_cut splits given':32s} {t(lambda: triton_sampler._cut(batch, tok, acc, lazy=True, splits=splits, **kw)):7.2f} us")
