"""The tokens in the interval that the splits' tallies (64 keys) leave each crossing's search, per row of a B = 1
call (V = 151,936, N(0, 9) logits), from torch copies of tally_keys and hinted."""
import sys, torch
sys.path.insert(0, "ci"); sys.path.insert(0, ".")
import bench_gpu
bench_gpu.DEVICE = "cpu"
from filter_stages import _caller
def okey(v):
    v = torch.where(v == 0, torch.zeros_like(v), v)
    b = v.view(torch.int32).long()
    return torch.where(b >= 0, b, b ^ 0x7FFFFFFF)
def kval(k):
    k = torch.as_tensor(k, dtype=torch.int64)
    b = torch.where(k >= 0, k, k ^ 0x7FFFFFFF).to(torch.int32)
    return b.view(torch.float32)
for salt in range(2):
    s = bench_gpu.InputSet(1, 151936, torch.float32, salt)
    for name, filt in [("top_p", (None, torch.tensor([0.9]), None)), ("top_k", (torch.tensor([50]), None, None))]:
        _caller([s], filt)(s)
        work = bench_gpu.work_space()[0]
        for r in range(5):
            L = s.logits[r].float(); k = okey(L)
            lo, hi = int(work[2*r]), int(work[2*r+1])
            above = int(k.max()) + 1
            hi2 = min(hi, above)
            va, vb = kval(lo), kval(hi2 - 1)
            t = torch.arange(64, dtype=torch.float32)
            keys = okey(va + (vb - va) * (t / 64))
            keys = torch.where((t > 0) & (keys > lo) & (keys < hi2), keys, torch.tensor(lo))
            m = L.max(); e = torch.exp(L - m); w = (e.double() * 2**44).long()
            if name == "top_k":
                # count crossing: k-th largest
                kth = torch.sort(k, descending=True).values[49]
                j = int((keys <= kth).sum()) - 1
            else:
                srt = torch.sort(k, descending=True); cum = torch.cumsum(w[srt.indices], 0)
                target = int(0.9 * float(w.sum()))
                pos = int((cum < target).sum()); kth = srt.values[pos]
                j = int((keys <= kth).sum()) - 1
            a = keys[j]; b = keys[j+1] if j + 1 < 64 and keys[j+1] > a else torch.tensor(hi2)
            inb = int(((k >= lo) & (k < hi2)).sum()); inh = int(((k >= a) & (k < b)).sum())
            print(salt, name, r, "gathered", inb, "hinted interval", inh)
