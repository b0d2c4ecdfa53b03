import sys, torch
sys.path.insert(0, ".")
from line_profiler import LineProfiler
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
lp = LineProfiler(triton_filter.cut_launches, triton_sampler._cut, triton_filter._work)
f = lp(lambda: triton_sampler.filtered_sample_into(tok, acc, batch, **kw))
for _ in range(20000): f()
lp.print_stats(output_unit=1e-6)
