"""A small driver over every path of the fused Triton sampler, for compute-sanitizer.

    python ci/sanitizer_driver.py                      # once without the sanitizer: warms Triton's cache
    compute-sanitizer --tool memcheck --error-exitcode 1 python ci/sanitizer_driver.py
    python ci/sanitizer_driver.py --parts 2 [--wrap "compute-sanitizer --tool racecheck ..."]
                                                       # two parts side by side, one per visible GPU

A part (``--part K/N``) runs every N-th work item from the K-th (the filtered cases numbered 1 to 9, then CASES,
then the helper kernels), on the inputs the whole run gives them. ``--parts N`` starts the N parts as processes of
their own, each pinned to a visible GPU in turn and run under ``--wrap`` where given, and prints their lines as
they come, each with its part.

Paths: standard / greedy / mixed / synthetic / block rules (the block rule's residual-mass launch), target
filters (the cut's launches: ranked, searched and bracketed rows; the one launch that is pass 1 too, waiting and
taking splits over), injected and seeded noise, float32 / bfloat16 /
float16 logits, dense and one-hot (None) drafters, V not a multiple of the block, zero-draft requests
(first, middle, last, all), B = 0 and B = 1, forced split-V launch plans (several splits per row, so the
partial merge and the atomic rendezvous run), and the two probe kernels of tests/triton_probes.py
(seeded noise, -log u).
Inputs are built on the CPU and copied over, so the sanitizer sees almost only the sampler's kernels.
Every call is also compared with the reference (real divergences are an error), so a run that the
sanitizer passes is also a correct one. Exit status 0 when all calls agree.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))   # triton_probes

from reference import Noise, SpecBatch, SpecOutput  # noqa: E402
from reference.philox import request_seeds  # noqa: E402
from reference.sample import synthetic_rates_f32  # noqa: E402
from specverify.checks.differential import compare_to_reference  # noqa: E402
from specverify.gpus import visible_gpus  # noqa: E402
from side_by_side import run_parts  # noqa: E402
from specverify.kernels import triton_filter  # noqa: E402
from specverify.kernels.triton_kernels import triton_sample_into  # noqa: E402
from specverify.kernels.triton_sampler import TritonBackend  # noqa: E402
from triton_probes import negative_log, seeded_noise  # noqa: E402


def batch_of(g, counts, V, dtype, drafter, greedy):
    """counts: draft counts; greedy: 'all', 'none' or 'mixed' temperatures."""
    B, T = len(counts), sum(counts)
    k = torch.tensor(counts, dtype=torch.int64)
    logits = torch.randn(T + B, V, generator=g, dtype=torch.float64) * 3
    if V > 16:
        logits[:, -(V % 16 or 16):] = float("-inf")   # the last tile's real entries masked
        logits[:, 0] = 0.0
    temperature = torch.full((B,), 0.8)
    if greedy == "all":
        temperature.zero_()
    elif greedy == "mixed":
        temperature[::2] = 0.0
    if drafter == "dense" and T:
        q = torch.softmax(torch.randn(T, V, generator=g, dtype=torch.float64) * 2, dim=-1).float()
        q = q / q.sum(dim=1, keepdim=True)
        drafts = torch.multinomial(q.double(), 1, generator=g).squeeze(1)
    else:
        q = torch.zeros(0, V) if drafter == "dense" else None
        drafts = torch.randint(0, V, (T,), generator=g)
    return SpecBatch(k, drafts, logits.to(dtype), q, temperature)


CASES = [
    # counts, V, dtype, drafter, greedy, method, block_v / splits (None: the default plan)
    ([3, 0, 2, 1], 1_000, torch.float32, "dense", "mixed", "standard", None),
    ([0, 2, 4], 777, torch.bfloat16, "dense", "none", "standard", (64, (3, 4))),
    ([1, 0, 3, 0], 1_031, torch.float16, "none", "mixed", "standard", (128, (2, 5))),
    ([2, 2, 0], 333, torch.float32, "dense", "all", "standard", (64, (3, 3))),
    ([0], 129, torch.float32, "dense", "none", "standard", None),           # B = 1, zero drafts
    ([4], 5_003, torch.bfloat16, "dense", "none", "standard", (256, (4, 8))),  # B = 1, split-V
    ([0, 0, 0], 50, torch.float16, "none", "mixed", "standard", None),      # all-zero batch
    ([], 64, torch.float32, "dense", "none", "standard", None),             # B = 0
    ([1, 3, 0, 2], 901, torch.float32, "dense", "mixed", "synthetic", (64, (2, 3))),
    ([2, 0, 1], 2_049, torch.bfloat16, "none", "none", "synthetic", None),
    ([4, 0, 1, 3, 2], 1_003, torch.float32, "dense", "mixed", "block", (64, (3, 4))),
    ([3, 2], 4_099, torch.bfloat16, "none", "none", "block", None),
    ([1, 1, 0], 257, torch.float16, "dense", "none", "block", None),        # blocks of one: no mass launch
]


# target filters (SPEC 3.4) through the backend, so the cut's launches run: counts, V, method. V = 8 is
# ranked whole (a record launch without the search), V = 1,003 gathered whole and searched or ranked,
# V = 20,011 (over the gather capacity) bracketed from its sample first; the block rule takes the masked
# logits. Batches of at most 8 rows (B K1: [2, 1] and [1, 2] here; triton_filter.ONE_LAUNCH_ROWS is pinned to
# 8 for these calls, so that both plans run) are cut in one launch, the others in three; the last two run
# triton_filter's PRE plan (GATHER_IN_PASS1: a count bracket, then pass 1 gathering the unweighed top-k rows,
# then the cut's three launches for the others). "top-p alone" filters by top-p alone in three launches: the lazy
# cut (``triton_lazy``) leaves the rows uncut that pass 2 needs no cut of. The one launch of a few rows is pass 1
# too (``triton_handoff``); "take-over" runs it with HANDOFF_SPIN = 0, so that every split computes whatever of
# its row's pass 1 is unpublished at its first look, several programs writing one split's partials at once
FILTERED = [([2, 0, 3, 1], 8, "standard", 0), ([1, 2, 0], 1_003, "standard", 0), ([1, 2], 1_003, "standard", 0),
            ([2, 1], 20_011, "standard", 0), ([3, 1, 2], 1_003, "block", 0), ([3, 2, 4, 1], 20_011, "standard", 1),
            ([2, 3, 1], 20_011, "block", 1), ([4, 3, 2, 4], 20_011, "standard", 0, "top-p alone"),
            ([1, 2], 20_011, "standard", 0, "take-over")]


def in_part(index: int, part: tuple[int, int] | None) -> bool:
    """Whether work item ``index`` (from 1: the filtered cases, CASES, the helper kernels) is in ``part`` (k, n)."""
    return part is None or (index - 1) % part[1] == part[0] - 1


def filtered_calls(g, device: str, tag: str | None = None, numbers: set[int] | None = None,
                   part: tuple[int, int] | None = None) -> int:
    """Each FILTERED case (those tagged ``tag``, or numbered so from 1, or in ``part``, where given) with top-k,
    top-p and min-p mixed per request, seeded, against the reference. A case left out still draws its batch, so
    that every case run gets the inputs it gets in the whole run."""
    errors = 0
    default, one_launch_rows, spin = triton_filter.GATHER_IN_PASS1, triton_filter.ONE_LAUNCH_ROWS, \
        triton_filter.HANDOFF_SPIN
    triton_filter.ONE_LAUNCH_ROWS = 8
    for number, (counts, V, method, gather_in_pass1, *tags) in enumerate(FILTERED, 1):
        plain = batch_of(g, counts, V, torch.float32, "dense", "mixed")
        if (tag and tag not in tags) or (numbers is not None and number not in numbers) or not in_part(number, part):
            continue
        triton_filter.GATHER_IN_PASS1 = gather_in_pass1
        triton_filter.HANDOFF_SPIN = 0 if "take-over" in tags else spin
        alone = "top-p alone" in tags
        B = plain.num_requests
        pick = lambda options: [options[b % len(options)] for b in range(B)]  # noqa: E731
        top_k, min_p = ([0], [0.0]) if alone else ([3, 0, 50, 1], [0.0, 0.05, 0.1, 0.0])
        batch = SpecBatch(plain.num_draft_tokens, plain.draft_token_ids, plain.target_logits, plain.draft_probs,
                          plain.temperature, torch.tensor(pick(top_k)), torch.tensor(pick([0.9, 1.0, 0.5])),
                          torch.tensor(pick(min_p)))
        seeds = request_seeds(4321 + V, B)
        start = time.perf_counter()     # each line's seconds: a cold cache's compiles show where the step's time goes
        out = TritonBackend()(batch.to(device), method=method, seed=seeds.to(device))
        cmp = compare_to_reference(batch, SpecOutput(out.token_ids.cpu(), out.num_accepted.cpu()),
                                   Noise.from_seeds(seeds, batch.num_draft_tokens, V), method=method)
        print(f"#{number} B={B} V={V} filtered {method} seeded gather_in_pass1={gather_in_pass1}"
              f"{''.join(' ' + tag for tag in tags)}: {cmp.decisions} decisions, "
              f"{len(cmp.real)} real / {len(cmp.ambiguous)} ambiguous divergences, "
              f"{time.perf_counter() - start:.1f}s", flush=True)
        if cmp.real:
            print(f"  ERROR: {cmp.real[0]}", flush=True)
            errors += 1
    triton_filter.GATHER_IN_PASS1, triton_filter.ONE_LAUNCH_ROWS, triton_filter.HANDOFF_SPIN = \
        default, one_launch_rows, spin
    return errors


def plain_inputs(g):
    """(item index, CASES entry, batch, path, seeds, noise) of each case and noise path, in the order the whole run
    draws them from ``g``; a part that leaves an item out still draws it."""
    for index, case in enumerate(CASES, len(FILTERED) + 1):
        counts, V, dtype, drafter, greedy, _, _ = case
        batch = batch_of(g, counts, V, dtype, drafter, greedy)
        for path in ("injected", "seeded"):
            seeds = request_seeds(1234 + len(counts), batch.num_requests)
            noise = Noise.from_seeds(seeds, batch.num_draft_tokens, V) if path == "seeded" else Noise.draw(batch, g)
            yield index, case, batch, path, seeds, noise


def run(device: str, filtered_tag: str | None = None, numbers: set[int] | None = None,
        part: tuple[int, int] | None = None) -> int:
    """Every case on ``device``, or with ``filtered_tag`` (the filtered cases tagged so, '': all) or ``numbers``
    (the filtered cases numbered so) those filtered cases alone, or the work items of ``part`` (k, n)."""
    g = torch.Generator().manual_seed(2026)
    errors = filtered_calls(g, device, filtered_tag, numbers, part)
    if filtered_tag is not None or numbers is not None:
        return errors
    for index, (counts, V, dtype, drafter, greedy, method, launch), batch, path, seeds, noise in plain_inputs(g):
        if not in_part(index, part):
            continue
        B, K = batch.num_requests, batch.max_draft
        dev = batch.to(device)
        steps = max(K, 1)
        rates = synthetic_rates_f32(0.6, steps) if method == "synthetic" else None
        kwargs = dict(method="synthetic", synthetic_acceptance_rate=0.6, num_speculative_steps=steps) \
            if method == "synthetic" else dict(method=method)
        block_v, splits = launch if launch else (None, None)
        start = time.perf_counter()
        noise_kw = dict(seeds=seeds.to(device)) if path == "seeded" else \
            dict(uniform=noise.uniform.to(device), exponential=noise.exponential.to(device))
        token_ids = torch.empty((B, K + 1), dtype=torch.int64, device=device)
        num_accepted = torch.empty(B, dtype=torch.int64, device=device)
        triton_sample_into(token_ids, num_accepted, dev.num_draft_tokens, dev.draft_token_ids, dev.target_logits,
                           dev.draft_probs, dev.temperature, rates=None if rates is None else rates.to(device),
                           block=method == "block", block_v=block_v, splits=splits, **noise_kw)
        out = SpecOutput(token_ids.cpu(), num_accepted.cpu())
        cmp = compare_to_reference(batch, out, noise, **kwargs)
        what = f"B={B} V={V} {str(dtype)[6:]} {drafter} greedy={greedy} {method} {path} launch={launch}"
        print(f"#{index} {what}: {cmp.decisions} decisions, {len(cmp.real)} real / {len(cmp.ambiguous)} ambiguous "
              f"divergences, {time.perf_counter() - start:.1f}s", flush=True)
        if cmp.real:
            print(f"  ERROR: {cmp.real[0]}", flush=True)
            errors += 1
    # probe kernels (tests/triton_probes.py), the last item
    u = torch.rand(3_000, generator=g).clamp(1e-7, 1 - 1e-7)
    if in_part(len(FILTERED) + len(CASES) + 1, part):
        errors += helper_kernels(device, u)
    if device == "cuda":
        torch.cuda.synchronize()
    return errors


def helper_kernels(device: str, u: torch.Tensor) -> int:
    """The two probe kernels against the reference: Philox uniforms, and -log u of ``u`` [3000]."""
    errors = 0
    k = torch.tensor([2, 0, 3], dtype=torch.int64)
    seeds = request_seeds(99, 3)
    got = seeded_noise(seeds.to(device), k.to(device), 1_001)
    want = Noise.from_seeds(seeds, k, 1_001)
    if not torch.equal(got.uniform.cpu(), want.uniform):
        print("ERROR: seeded_noise uniforms differ from reference.philox", flush=True)
        errors += 1
    e = negative_log(u.to(device)).cpu()
    if not torch.allclose(e.double(), -torch.log(u.double()), rtol=1e-5, atol=1e-7):
        print("ERROR: negative_log is off", flush=True)
        errors += 1
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--filtered", metavar="TAG", default=None,
                    help="only the filtered cases tagged TAG ('' for every filtered case): a sanitizer's slow tools "
                         "on one path")
    ap.add_argument("--filtered-cases", metavar="N,N", default=None,
                    help=f"only the filtered cases numbered so (1 to {len(FILTERED)}, as the lines print them): a "
                         "sanitizer's slow tools in parts that each fit a call")
    ap.add_argument("--part", metavar="K/N", default=None,
                    help="only part K of N: every N-th work item from the K-th, on the inputs of the whole run")
    ap.add_argument("--parts", type=int, metavar="N", default=None,
                    help="run the N parts side by side, each its own process pinned to a visible GPU in turn")
    ap.add_argument("--wrap", metavar="COMMAND", default="",
                    help="with --parts: the command each part runs under (a compute-sanitizer tool and its options)")
    args = ap.parse_args()
    # --filtered and --filtered-cases narrow each other; a part is a share of the whole run
    chosen = [name for name, value in (("--filtered", args.filtered), ("--filtered-cases", args.filtered_cases),
                                       ("--part", args.part), ("--parts", args.parts)) if value is not None]
    if len(chosen) > 1 and set(chosen) & {"--part", "--parts"}:
        ap.error(f"{' and '.join(chosen)} choose the work two ways: give one")
    if args.wrap and args.parts is None:
        ap.error("--wrap is for --parts: run a single driver under the wrapping command itself")
    if args.parts is not None:
        if args.parts < 1:
            ap.error(f"--parts must be at least 1, got {args.parts}")
        me = [sys.executable, os.path.abspath(__file__), "--device", args.device]
        gpus = visible_gpus() if args.device == "cuda" else []
        return run_parts(args.parts, lambda k: shlex.split(args.wrap) + me + ["--part", f"{k}/{args.parts}"], gpus)
    part = None
    if args.part is not None:
        try:
            k, n = (int(x) for x in args.part.split("/"))
        except ValueError:
            ap.error(f"--part takes K/N, two whole numbers, not {args.part!r}")
        if not 1 <= k <= n:
            ap.error(f"--part {args.part}: K must lie between 1 and N")
        part = (k, n)
    numbers = None
    if args.filtered_cases is not None:
        try:
            numbers = {int(n) for n in args.filtered_cases.split(",")}
        except ValueError:
            ap.error(f"--filtered-cases takes numbers separated by commas, not {args.filtered_cases!r}")
        if not numbers <= set(range(1, len(FILTERED) + 1)):
            ap.error(f"--filtered-cases: the filtered cases are numbered 1 to {len(FILTERED)}, "
                     f"not {sorted(numbers - set(range(1, len(FILTERED) + 1)))}")
    start = time.perf_counter()
    errors = run(args.device, args.filtered, numbers, part)
    ran = (f"part {part[0]} of {part[1]} of the work items" if part else
           f"{len(CASES)} cases x 2 noise paths + {len(FILTERED)} filtered + 2 helper kernels"
           if args.filtered is None and numbers is None else
           f"the filtered cases tagged {args.filtered!r}" if numbers is None else
           f"the filtered cases numbered {sorted(numbers)}"
           + (f" and tagged {args.filtered!r}" if args.filtered else ""))
    print(f"sanitizer driver: {ran}, {errors} error(s), "
          f"{time.perf_counter() - start:.1f}s", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
