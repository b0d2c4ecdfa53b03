import sys, time, torch
sys.path.insert(0, "tests"); sys.path.insert(0, ".")
from specverify.kernels import triton_filter, triton_sampler, triton_kernels
from specverify.kernels.triton_kernels import launches
from reference import SpecBatch
B, K, V = 1, 4, 151936
logits = torch.randn(B * (K + 1), V)
batch = SpecBatch(torch.tensor([K]), torch.zeros(K, dtype=torch.int64), logits, torch.full((K, V), 1.0 / V), torch.ones(B),
                  torch.tensor([50]), torch.tensor([0.9]), torch.tensor([0.1]))
tok = torch.empty((B, K + 1), dtype=torch.int64); acc = torch.empty(B, dtype=torch.int64)
u = torch.rand(K); e = torch.rand(B, V)
def t(f, n=3000):
    f(); s = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - s) / n * 1e6
kw = dict(uniform=u, exponential=e)
sp = triton_sampler.cut_splits(batch.top_k, B, K + 1, V, logits.device)
steps = launches(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, batch.draft_probs, batch.temperature, splits=sp, **kw)
print("cut_splits", t(lambda: triton_sampler.cut_splits(batch.top_k, B, K + 1, V, logits.device)))
print("launches", t(lambda: launches(tok, acc, batch.num_draft_tokens, batch.draft_token_ids, logits, batch.draft_probs, batch.temperature, splits=sp, **kw)))
print("cut_launches", t(lambda: triton_filter.cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p, steps[-1])))
print("_settings", t(lambda: triton_filter._settings()))
cut, rec = triton_filter.cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p, steps[-1])
print("with_cut", t(lambda: triton_sampler.with_cut(steps[-1], rec)))
print(len(cut), [len(c[2]) + len(c[3]) for c in cut], len(steps[0][2]) + len(steps[0][3]), len(steps[1][2]) + len(steps[1][3]))
from specverify.kernels.triton_kernels import default_splits
dev = logits.device
print("default_splits", t(lambda: default_splits(B, K, dev)))
print("pass1_splits", t(lambda: triton_filter.pass1_splits(5, V, 100, True)))
import cProfile, pstats
cProfile.run("for _ in range(2000): triton_sampler.cut_splits(batch.top_k, B, K + 1, V, dev)", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("tottime").print_stats(8)
