"""SPEC 3.6: batches with non-finite target rows, on every backend and every declared noise path.

Each batch alternates finite requests with non-finite ones, whose bad row (a draft row or the bonus
row, of greedy and random requests, with and without draft probabilities) is one of:

    all_nan, some_nan, all_neginf, one_posinf, several_posinf

A backend passes a batch by raising ValueError for it, or by returning a well-formed output (the
guard checks ids in [0, V), accepted ids equal to the drafts, -1 after) in which every finite
request is unaffected: equal to the reference under shared noise, or, with a stream of its own, to
its own output on the batch with the bad rows made finite again, under the same seeds.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput, select_requests
from specverify.checks.common import call_example, paths
from specverify.checks.runner import CheckFailure, Context, Needs
from specverify.generate import random_batch
from specverify.strategies import Example

ROW_KINDS = ("all_nan", "some_nan", "all_neginf", "one_posinf", "several_posinf")
NONFINITE_CASES = ("rows",)
NONFINITE_NEEDS = Needs(noise="any")


def spoil(row: torch.Tensor, kind: str, g: torch.Generator) -> None:
    """Make ``row`` [V] non-finite in place, the way ``kind`` names."""
    V = row.shape[0]
    if kind == "all_nan":
        row.fill_(float("nan"))
    elif kind == "some_nan":
        row[torch.randperm(V, generator=g)[: max(1, V // 3)]] = float("nan")
    elif kind == "all_neginf":
        row.fill_(float("-inf"))
    elif kind == "one_posinf":
        row[torch.randint(0, V, (1,), generator=g)] = float("inf")
    elif kind == "several_posinf":
        row[torch.randperm(V, generator=g)[: min(V, 3)]] = float("inf")
    else:
        raise ValueError(f"unknown row kind {kind!r}")


def nonfinite_batch(seed: int, V: int, drafter: str) -> tuple[SpecBatch, SpecBatch, torch.Tensor]:
    """(the batch with non-finite rows, the same batch with every row finite, [B] bool non-finite
    requests): ten requests, every odd one spoiled, the five row kinds in turn."""
    g = torch.Generator().manual_seed(seed)
    clean = random_batch(g, num_requests=10, vocab_size=V, max_draft=3, drafter=drafter, greedy_fraction=0.3,
                         zero_draft_fraction=0.2)
    logits = clean.target_logits.clone()
    off = clean.logit_offsets().tolist()
    bad = torch.zeros(10, dtype=torch.bool)
    for i, b in enumerate(range(1, 10, 2)):
        row = off[b] + int(torch.randint(0, off[b + 1] - off[b], (1,), generator=g))
        spoil(logits[row], ROW_KINDS[(i + seed) % len(ROW_KINDS)], g)
        bad[b] = True
    spoiled = SpecBatch(clean.num_draft_tokens, clean.draft_token_ids, logits, clean.draft_probs, clean.temperature,
                        allow_nonfinite=True)
    return spoiled, clean, bad


def check_nonfinite_rows(ctx: Context, case: str) -> None:
    refused = 0
    rounds = max(2, ctx.profile.examples // 4)
    for i in range(rounds):
        for drafter in ("dense", "none") if ctx.profile.dense_drafts else ("none",):
            batch, clean, bad = nonfinite_batch(1000 * i + (drafter == "none"), min(ctx.profile.max_vocab, 64), drafter)
            g = torch.Generator().manual_seed(i)
            example = Example(batch, Noise.draw(batch, g), torch.randint(0, 2 ** 62, (10,), generator=g),
                              f"non-finite rows, round {i}, drafter {drafter}")
            for path in paths(ctx):
                seeded = path == "seeded"
                try:
                    out, shared = call_example(ctx, example, seeded=seeded)
                except ValueError:
                    refused += 1         # a legitimate answer (SPEC 3.6): the whole batch refused
                    continue
                finite = torch.nonzero(~bad).flatten()
                got = select_requests_output(out, finite, batch)
                if shared is not None:
                    ctx.agree(select_requests(batch, finite), got, shared.select(batch, finite),
                              where=f"{path} noise, finite requests {finite.tolist()} of a batch with non-finite rows")
                else:
                    own = call_example(ctx, Example(clean, example.noise, example.seeds, example.description),
                                       seeded=True)[0]
                    want = select_requests_output(own, finite, clean)
                    if got.emitted() != want.emitted():
                        raise CheckFailure(f"seeded noise: finite requests {finite.tolist()} emitted {got.emitted()} "
                                           f"beside non-finite rows, {want.emitted()} with those rows finite")
                ctx.result.samples += batch.num_requests
    if refused:
        ctx.result.message = f"the backend refused {refused} batch(es) with ValueError (allowed by SPEC 3.6)"


def select_requests_output(out, requests: torch.Tensor, batch: SpecBatch):
    """The output rows of ``requests`` [R], narrowed to their own longest draft."""
    width = int(batch.num_draft_tokens[requests].max()) + 1 if requests.numel() else 1
    idx = requests.to(out.token_ids.device)
    return SpecOutput(out.token_ids[idx, :width], out.num_accepted[idx])
