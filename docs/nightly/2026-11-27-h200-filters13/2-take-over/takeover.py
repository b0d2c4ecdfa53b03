"""One take-over cut (HANDOFF_SPIN=0) of the one-launch test's batch, for compute-sanitizer."""
import sys, dataclasses, torch
sys.path.insert(0, "tests"); sys.path.insert(0, ".")
import test_triton_one_launch as T
from specverify.kernels import triton_filter
from specverify.kernels.triton_filter_plan import one_launch_splits
triton_filter.CAP, triton_filter.NS, triton_filter.CH = 64, 32, 4
triton_filter.ONE_LAUNCH_ROWS = 20
triton_filter.HANDOFF_SPIN = int(sys.argv[1]) if len(sys.argv) > 1 else 0
V, dev = 160, "cuda"
rows = T._rows(7, 4, V, dev)
batch = dataclasses.replace(rows, num_draft_tokens=torch.tensor([3, 0, 0, 0], device=dev),
                            draft_token_ids=torch.zeros(3, dtype=torch.int64, device=dev),
                            target_logits=torch.cat([rows.target_logits[:1].expand(3, V), rows.target_logits]),
                            top_k=torch.tensor([0, 50, 3, 0], device=dev), top_p=torch.tensor([0.9, 1.0, 0.5, 1.0], device=dev),
                            min_p=torch.tensor([0.0, 0.05, 0.0, 0.1], device=dev), temperature=torch.tensor([1.0, 0.7, 1.0, 2.5], device=dev))
sf = one_launch_splits(16, triton_filter.ONE_LAUNCH_PROGRAMS, triton_filter.ONE_LAUNCH_SPLITS)
l, r, p = T._cut_and_partials(batch, 0, block_v=32, splits=(sf, 2))
torch.cuda.synchronize()
print("ok", l, r[5].tolist())
