import sys, time, torch, cProfile, pstats
sys.path.insert(0, ".")
from specverify.kernels import triton_filter, triton_sampler, triton_kernels, triton_launch
from specverify.kernels.triton_kernels import launches
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
    for _ in range(10): f()
    s = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - s) / n * 1e6
print("unfiltered", t(lambda: triton_kernels.triton_sample_into(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature, **kw)))
print("filtered", t(lambda: triton_sampler.filtered_sample_into(tok, acc, batch, **kw)))
cProfile.run("for _ in range(20000): triton_sampler.filtered_sample_into(tok, acc, batch, **kw)", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("tottime").print_stats(16)
