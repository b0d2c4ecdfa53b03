"""B = 1 one-launch cut, per-phase %globaltimer stamps (probes/stamped/ copies over specverify/kernels first)."""
import statistics, sys, torch
sys.path.insert(0, ".")
from reference import SpecBatch
from specverify.kernels import triton_filter, triton_sampler
for item in sys.argv[1:]:
    k, v = item.split("="); setattr(triton_filter, k, int(v))
V, B, K = 151936, 1, 4
dev = "cuda"
g = torch.Generator().manual_seed(0)
logits = (torch.randn(B * (K + 1), V, generator=g) * 3).float().to(dev)
drafts = torch.randint(0, V, (K,), generator=g).to(dev)
u = torch.rand(K, generator=g).to(dev)
x = torch.empty(B, V).exponential_(generator=g).to(dev)
NR = B * (K + 1)
names = ["norms", "bracket", "read", "pack", "tally", "ticket", "|rec sums", "tallies", "k find", "p find", "tie/z", "end"]
for name, f in (("top_k=50", dict(top_k=50)), ("top_p=0.9", dict(top_p=0.9)), ("min_p=0.1", dict(min_p=0.1)),
                ("top_k=50,top_p=0.9", dict(top_k=50, top_p=0.9))):
    fl = dict(top_k=torch.tensor([f.get("top_k", 0)], device=dev), top_p=torch.tensor([f.get("top_p", 1.0)], device=dev),
              min_p=torch.tensor([f.get("min_p", 0.0)], device=dev))
    batch = SpecBatch(torch.tensor([K], device=dev), drafts, logits, None, torch.tensor([1.0], device=dev), **fl)
    tok = torch.empty((1, K + 1), dtype=torch.int64, device=dev); na = torch.empty(1, dtype=torch.int64, device=dev)
    rows = []
    for it in range(60):
        triton_sampler.filtered_sample_into(tok, na, batch, uniform=u, exponential=x)
        torch.cuda.synchronize()
        if it < 10:
            continue
        work = next(iter(triton_filter._buffers.values()))[0]
        sf = triton_filter._last_sf
        base = triton_filter._last_stamp_at
        st = work[base: base + NR * sf * 16].view(NR, sf, 16).cpu()
        t0 = st[:, :, 0].min()
        rel = (st.double() - t0.double()) / 1000.0
        per_row = []
        for r in range(NR):
            wr = st[r, :, 7] == 1
            s = int(wr.nonzero()[0]) if wr.any() else 0
            vals = [rel[r, :, i].max().item() for i in (1, 2, 3, 4, 5, 6)] + [rel[r, s, i].item() for i in (8, 9, 10, 11, 12, 13)]
            per_row.append(vals + [int(st[r, s, 14])])
        rows.append(per_row)
    med = lambda r, i: statistics.median(c[r][i] for c in rows)
    print(f"== {name} (sf={sf}; us from the launch's first program start; median of {len(rows)} calls; "
          f"negative: phase not reached)")
    print("row " + " ".join(f"{n:>8s}" for n in names) + " | gathered")
    for r in range(NR):
        print(f"{r:3d} " + " ".join(f"{med(r, i):8.1f}" for i in range(12)) + f" | {int(med(r, 12))}")
