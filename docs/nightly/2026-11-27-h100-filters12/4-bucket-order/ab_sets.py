"""A/B at B = 1: latency in turn (bench_gpu.time_paired) of the filtered call under each variant of triton_filter
settings ("NAME=V,NAME=V" or "default"), each against the unfiltered call, in rounds; outputs compared."""
import sys, statistics
import torch
sys.path.insert(0, "ci"); sys.path.insert(0, ".")
import bench_gpu
from filter_stages import _filters
from reference import SpecBatch
from specverify.kernels import triton_sampler, triton_filter

class A: all_tensors = True; B = 1

sets = bench_gpu.make_sets(1, 151_936, torch.float32, 50 << 20)
rounds = int(sys.argv[1])
variants = sys.argv[2:]
defaults = {}
for v in variants:
    for item in v.split(","):
        if "=" in item:
            defaults.setdefault(item.split("=")[0], getattr(triton_filter, item.split("=")[0]))
def apply(v):
    for k, x in defaults.items():
        setattr(triton_filter, k, x)
    for item in v.split(","):
        if "=" in item:
            k, x = item.split("="); setattr(triton_filter, k, int(x))
for name, setting in bench_gpu.FILTER_SETTINGS.items():
    if setting is None:
        continue
    filters = _filters(A, setting)
    batches = {id(s): SpecBatch(s.num_draft, s.drafts, s.logits, s.q, s.temperature, *filters) for s in sets}
    def filtered(s):
        triton_sampler.filtered_sample_into(s.token_ids, s.num_accepted, batches[id(s)], uniform=s.uniform,
                                            exponential=s.exponential)
    outs = {}
    for v in variants:
        apply(v)
        filtered(sets[0]); torch.cuda.synchronize()
        outs[v] = (sets[0].token_ids.clone(), sets[0].num_accepted.clone(),
                   next(iter(triton_filter._buffers.values()))[1][:30].clone())
    same = all(torch.equal(a, b) for v in variants for a, b in zip(outs[variants[0]], outs[v]))
    res = {v: [] for v in variants}
    for r in range(rounds):
        for v in variants:
            apply(v)
            plain, filt = bench_gpu.time_paired(lambda s: s.fused(), sets, filtered, sets)
            res[v].append((filt * 1e6, plain * 1e6))
    for v in variants:
        ratios = [f / p for f, p in res[v]]
        print(f"{name:20s} {v:12s}: latency ratio median {statistics.median(ratios):.2f} "
              f"(rounds {', '.join(f'{x:.2f}' for x in ratios)}); filtered {statistics.median(f for f, _ in res[v]):.1f}"
              f" / unfiltered {statistics.median(p for _, p in res[v]):.1f} us; same outputs and records: {same}",
              flush=True)
