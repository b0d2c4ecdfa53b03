"""The tokens each row's one-launch bracket gathers at NS 4,096, 8,192 and 16,384 (B = 1, V = 151,936, N(0, 9)
logits, three input sets): top-p 0.9 and top-k 50, from the work space's brackets after an interpreter call."""
import sys, time, torch
sys.path.insert(0, "ci"); sys.path.insert(0, ".")
import bench_gpu
bench_gpu.DEVICE = "cpu"
from filter_stages import _caller
from specverify.kernels import triton_filter
def okey(v):
    v = torch.where(v == 0, torch.zeros_like(v), v)
    b = v.view(torch.int32).long()
    return torch.where(b >= 0, b, b ^ 0x7FFFFFFF)
for salt in range(3):
  sets = [bench_gpu.InputSet(1, 151936, torch.float32, salt)]
  s = sets[0]
  for ns in (4096, 8192, 16384):
    triton_filter.NS = ns
    out = []
    for name, filt in [("top_p", (None, torch.tensor([0.9]), None)), ("top_k", (torch.tensor([50]), None, None))]:
        _caller(sets, filt)(s)
        work = bench_gpu.work_space()[0]
        k = okey(s.logits[:5].float())
        g = [int(((k[r] >= work[2*r]) & (k[r] < work[2*r+1])).sum()) for r in range(5)]
        out.append(f"{name} {g}")
    print(salt, ns, *out, flush=True)
