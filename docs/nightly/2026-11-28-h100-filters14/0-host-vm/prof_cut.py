import sys, time, torch, cProfile, pstats
sys.path.insert(0, ".")
from specverify.kernels import triton_filter, triton_sampler
from specverify.kernels.triton_kernels import launches
from reference import SpecBatch
B, K, V = 1, 4, 151936
logits = torch.randn(B * (K + 1), V)
batch = SpecBatch(torch.tensor([K]), torch.zeros(K, dtype=torch.int64), logits, torch.full((K, V), 1.0 / V), torch.ones(B),
                  torch.tensor([50]), torch.tensor([0.9]), torch.tensor([0.1]))
tok = torch.empty((B, K + 1), dtype=torch.int64); acc = torch.empty(B, dtype=torch.int64)
u = torch.rand(K); e = torch.rand(B, V)
kw = dict(uniform=u, exponential=e)
sp = triton_sampler.cut_splits(batch.top_k, B, K + 1, V, logits.device)
steps = launches(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, batch.draft_probs, batch.temperature, splits=sp, **kw)
f = lambda: triton_filter.cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p, steps[-1])
for _ in range(3): f()
s = time.perf_counter()
for _ in range(20000): f()
print("cut_launches us", (time.perf_counter() - s) / 20000 * 1e6)
cProfile.run("for _ in range(20000): f()", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("tottime").print_stats(12)
