"""What SGLang's tree_speculative_sampling_target_only emits where a node's siblings cover the target's support
and the node's coin lies above their float32 running sum (docs/kernels.md).

    python ci/sglang_fallback_probe.py [--requests 4096] [--json FILE]      # $SPECVERIFY_SGLANG_MODULE's kernel

Each probed request is a star: the root has SIBLINGS children whose tokens are the whole support of the root's
target p (V = 16, the other ids -inf). In exact arithmetic the coin is below the siblings' total mass, 1, so the
rule accepts one of them. The kernel sums their probabilities in float32, and for the p chosen here that sum is
at most 1 - 2^-23. A coin of 1 - 2^-24 (the largest value of torch.rand) then rejects every sibling. The residual
relu(p - rejected) is zero everywhere, where SPEC 3.8 emits a sample of p.

Two layouts, each with the same targets:

    top coin    the root's coin is 1 - 2^-24: the rounding case above
    half coin   the root's coin is 0.5: a sibling is accepted, as usual (the control)

Prints, per layout, how many requests accepted a sibling and which tokens were emitted at the others, with the
probability 0 ones named. It checks nothing: a probability-0 token is a defect, but SGLang draws a coin that
high once in 2^24 (the harness's own coins lie in (0, 1) and its statistics see no such rate).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from reference import SpecBatch  # noqa: E402
from specverify.adapters import sglang  # noqa: E402

V = 16
SIBLINGS = 8
TOP_COIN = 1.0 - 2.0 ** -24


def root_logits(seed: int = 5) -> torch.Tensor:
    """[V] float64 logits of a root whose support is ids 1..SIBLINGS and whose float32 probabilities, summed in
    sibling order in float32, stay at or below 1 - 2^-23: the first such draw of a seeded search."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(10_000):
        logits = torch.full((V,), float("-inf"), dtype=torch.float64)
        # float32 values, so that the batch's float32 logits give these very probabilities
        logits[1:SIBLINGS + 1] = (torch.randn(SIBLINGS, generator=g, dtype=torch.float64) * 2).float().double()
        p = torch.softmax(logits, 0).float()
        mass = torch.zeros((), dtype=torch.float32)
        for x in range(1, SIBLINGS + 1):
            mass = mass + p[x]
        if float(mass) <= 1.0 - 2.0 ** -23:
            return logits
    raise RuntimeError("no root found whose float32 sum rounds below 1 - 2^-23")


def star_batch(requests: int, device: str) -> SpecBatch:
    """``requests`` stars, each the root of ``root_logits`` with its SIBLINGS support tokens as children."""
    row = root_logits()
    logits = row.repeat(requests * (SIBLINGS + 1), 1)        # the root's row, then each child's row
    drafts = torch.arange(1, SIBLINGS + 1).repeat(requests)
    parents = torch.full((requests * SIBLINGS,), -1, dtype=torch.int64)
    batch = SpecBatch(torch.full((requests,), SIBLINGS), drafts, logits.float(), None, torch.ones(requests),
                      tree_parents=parents)
    return batch.to(device)


def probe(requests: int, device: str, module=None) -> list[dict]:
    """Per layout: the requests, how many accepted a sibling, and the tokens emitted at the others."""
    module = sglang.kernel_module(module)
    batch = star_batch(requests, device)
    launch = sglang.launch_layout(batch)
    p = torch.softmax(batch.target_logits[0].double().cpu(), 0)     # the root's p, as the kernel is given it
    g = torch.Generator().manual_seed(2026)
    found = []
    for layout, coin in (("top coin", TOP_COIN), ("half coin", 0.5)):
        coins = torch.rand(launch.B, launch.W, generator=g)
        coins[:, 0] = coin
        final = torch.rand(launch.B, generator=g)
        out = sglang.target_only(module, batch, launch, coins, final)
        accepted = out.num_accepted.cpu() > 0
        emitted = out.token_ids[:, 0].cpu()[~accepted]
        ids, counts = torch.unique(emitted, return_counts=True)
        tally = {int(i): int(c) for i, c in zip(ids, counts)}
        found.append({"layout": layout, "coin": coin, "requests": requests, "accepted": int(accepted.sum()),
                      "emitted_at_rejections": tally,
                      "probability_zero": {i: c for i, c in tally.items() if not 0 <= i < V or p[i] == 0}})
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=4096)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args()
    if args.requests < 1:
        ap.error(f"--requests must be at least 1, got {args.requests}")
    try:
        found = probe(args.requests, args.device)
    except ImportError as exc:
        print(f"sglang_fallback_probe: {exc}", file=sys.stderr)
        return 2
    for f in found:
        print(f"{f['layout']} ({f['coin']!r}): {f['accepted']} of {f['requests']} requests accepted a sibling; "
              f"at the others emitted {f['emitted_at_rejections'] or 'nothing'}; "
              f"of probability 0: {f['probability_zero'] or 'none'}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(found, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
