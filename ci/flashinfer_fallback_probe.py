"""What FlashInfer's chain_speculative_sampling emits where the residual is zero everywhere (docs/kernels.md).

    python ci/flashinfer_fallback_probe.py [--rows 100000] [--launches 50] [--json FILE]

Each probed request has one draft, x ~ p, and q = p (1 + 5e-4): the draft is rejected with probability
5e-4 / (1 + 5e-4), and max(p - q, 0) is then zero everywhere, where SPEC 3 emits a sample of p. p is 0 at
ids 0, 3 and 7. Two layouts of one launch:

    alike       every request is a probed one
    neighbours  every other request's target and q are one-hot at id 3 (its draft 3 is accepted and its bonus is
                3), so an id 3 emitted by a probed request can only come from another request

Prints, per layout, the tokens emitted at the probed requests' rejections against p's expected counts.
Needs CUDA and FlashInfer; it checks nothing (the harness's token_distribution[residual_fallback] does).
"""

from __future__ import annotations

import argparse
import json

import torch

V = 8
P = torch.tensor([0.0, 0.15, 0.25, 0.0, 0.2, 0.25, 0.15, 0.0], dtype=torch.float64)
EXCESS = 5e-4
NEIGHBOUR_ID = 3


def _launch(kernel, rows: int, layout: str, g: torch.Generator):
    """(emitted ids at the probed requests' rejections [?], rejections, probed requests) of one launch."""
    dev = "cuda"
    p = P.float().to(dev)
    target = p.repeat(rows, 2, 1)                      # [R, 2, V]: the draft's row and the bonus row
    q = (P * (1 + EXCESS)).float().to(dev).repeat(rows, 1, 1)
    drafts = torch.multinomial(P.to(dev), rows, replacement=True, generator=g).to(torch.int32)[:, None]
    probed = torch.ones(rows, dtype=torch.bool, device=dev)
    if layout == "neighbours":
        probed[1::2] = False
        one_hot = torch.nn.functional.one_hot(torch.tensor(NEIGHBOUR_ID), V).float().to(dev)
        target[1::2] = one_hot
        q[1::2] = one_hot
        drafts[1::2] = NEIGHBOUR_ID
    accepted = torch.zeros(rows, dtype=torch.int32, device=dev)
    emitted = torch.zeros(rows, dtype=torch.int32, device=dev)
    seeds = torch.randint(0, 2 ** 62, (rows,), generator=g, device=dev)
    out = kernel(q, drafts, target, accepted, emitted, True, None, seed=seeds, offset=torch.zeros_like(seeds))
    out = out[0] if isinstance(out, tuple) else out
    rejected = probed & (emitted == 0)
    return out[rejected, 0].long(), int(rejected.sum()), int(probed.sum())


def probe(rows: int, launches: int) -> list[dict]:
    from flashinfer.sampling import chain_speculative_sampling  # noqa: PLC0415

    g = torch.Generator(device="cuda").manual_seed(2026)
    found = []
    for layout in ("alike", "neighbours"):
        ids, rejections, probed = [], 0, 0
        for _ in range(launches):
            got, r, n = _launch(chain_speculative_sampling, rows, layout, g)
            ids.append(got.cpu())
            rejections += r
            probed += n
        ids = torch.cat(ids)
        inside = ids[(ids >= 0) & (ids < V)]
        counts = torch.bincount(inside, minlength=V)[:V].tolist()
        outside = sorted(set(ids[(ids < 0) | (ids >= V)].tolist()))
        found.append(dict(layout=layout, probed=probed, rejections=rejections, counts=counts,
                          expected=[round(rejections * float(P[v]), 1) for v in range(V)],
                          outside_count=int(((ids < 0) | (ids >= V)).sum()), outside_ids=outside[:10]))
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--launches", type=int, default=50)
    ap.add_argument("--json", help="also write the tallies here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device")
    found = probe(args.rows, args.launches)
    print(f"FlashInfer chain_speculative_sampling at an empty residual: {args.launches} launches of {args.rows:,} "
          f"requests, one draft each, V = {V}, q = p (1 + {EXCESS:g}); p = 0 at ids 0, 3, 7")
    ids = " | ".join(f"id {v}" for v in range(V))
    print(f"| layout | probed requests | rejections | {ids} | ids outside [0, V) |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in range(V)) + " | --- |")
    for f in found:
        cells = " | ".join(f"{c} ({e:g})" for c, e in zip(f["counts"], f["expected"]))
        print(f"| {f['layout']} | {f['probed']:,} | {f['rejections']:,} | {cells} | {f['outside_count']} "
              f"{f['outside_ids']} |")
    print("(each id: emitted at a rejection (expected under SPEC 3's fallback to p))")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(found, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
