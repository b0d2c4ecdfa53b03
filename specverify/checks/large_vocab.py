"""Structural checks at production vocabulary sizes, for every backend whatever its noise path.

The differential large-vocabulary case needs noise the reference can share, so a backend with only
its own seeded stream was never run at V = 151,936 (the vocabulary of GHSA-8wr5-jm2h-8r4f, where a
padded last tile was read as valid) or 262,144. These checks need no shared noise: every emitted id
must lie in [0, V) and in the support it was drawn from, whatever the noise. Every logit sits 40 below
0 (softmax does not change), so a kernel that reads a padded lane as logit 0 puts the mass there.

    last_tile_masked   the last 1024-wide tile of a row at -inf, wholly or in part (the advisory)
    mass_at_end        the last three ids carry all but about 1e-10 of each row's mass: every emitted
                       token must be one of them (a false alarm needs a 1e-10 event)

Sizes: V = 151,936 and 262,144 (``Profile.production_vocabs``) on every profile (a kernel whose code
path changes above some vocabulary size, split-V or multi-block, is run there whatever the device), and
on the CPU profiles also V = 4,099 (four full tiles and a last tile of three ids). Three requests a call keep each call at
milliseconds on a CPU backend (seconds in the Triton interpreter).
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch
from specverify.checks.common import call_example, paths
from specverify.checks.runner import CheckFailure, Context, Needs
from specverify.checks.structural import support_problems
from specverify.strategies import Example

TILE = 1024
REDUCED_VOCAB = 4_099
LARGE_VOCAB_CASES = ("last_tile_masked", "mass_at_end")
LARGE_VOCAB_NEEDS = Needs(noise="any")
END_BOOST = 40.0          # logit added to the last three ids in mass_at_end
SHIFT = 40.0              # subtracted from every logit


def structural_vocabs(profile) -> tuple[int, ...]:
    """The profile's production vocabularies and its own large ones, and V = 4,099 on the CPU."""
    large = tuple(v for v in profile.large_vocabs if v >= 100_000)
    sizes = tuple(sorted(set(large + tuple(profile.production_vocabs))))
    return sizes if profile.device != "cpu" else (REDUCED_VOCAB,) + sizes


def large_vocab_batch(case: str, V: int, g: torch.Generator, dense: bool = True) -> SpecBatch:
    """Three requests (2 drafts at temperature 1, a greedy one with none, 1 draft at temperature 0.7)
    with dense draft probabilities near the target and drafts drawn from them (passed as one-hot
    drafts when not ``dense``)."""
    k = torch.tensor([2, 0, 1])
    temperature = torch.tensor([1.0, 0.0, 0.7])
    rows = int(k.sum()) + 3
    # Every logit well below 0 (softmax is shift invariant): a pad read as logit 0 would carry the mass.
    logits = torch.randn(rows, V, generator=g) * 3 - SHIFT
    last = (V - 1) // TILE * TILE
    if case == "last_tile_masked":
        for r in range(rows):   # even rows: the whole last tile; odd rows: its second half
            logits[r, last + (0 if r % 2 == 0 else (V - last) // 2):] = float("-inf")
    elif case == "mass_at_end":
        logits[:, V - 3:] += END_BOOST
    else:
        raise ValueError(f"unknown large-vocabulary case {case!r}")
    request = torch.repeat_interleave(torch.arange(3), k + 1)
    is_draft = torch.ones(rows, dtype=torch.bool)
    is_draft[torch.cumsum(k + 1, 0) - 1] = False
    t = temperature[request][is_draft].clamp(min=0.1)[:, None]
    q = torch.softmax(logits[is_draft].nan_to_num(neginf=-SHIFT - 30) / t + torch.randn(int(k.sum()), V, generator=g), -1)
    drafts = torch.multinomial(q.double(), 1, generator=g).flatten()
    return SpecBatch(k, drafts, logits, q if dense else None, temperature)


def check_large_vocab_structure(ctx: Context, case: str) -> None:
    calls = max(1, ctx.profile.examples // 10)
    for V in structural_vocabs(ctx.profile):
        for i in range(calls):
            g = torch.Generator().manual_seed(V * 100 + i)
            batch = large_vocab_batch(case, V, g, ctx.profile.dense_drafts)
            example = Example(batch, Noise.draw(batch, g), torch.randint(0, 2 ** 62, (3,), generator=g),
                              f"{case} at V = {V}, call {i}")
            for path in paths(ctx):
                out, _ = call_example(ctx, example, seeded=path == "seeded")
                problems = support_problems(batch, out)
                if case == "mass_at_end":
                    problems += _away_from_the_end(out, V)
                if problems:
                    raise CheckFailure(f"V = {V}, {path} noise: " + "; ".join(problems[:3]))
                ctx.result.samples += batch.num_requests


def _away_from_the_end(out, V: int) -> list[str]:
    ids, n = out.token_ids.cpu(), out.num_accepted.cpu()
    problems = []
    for b in range(ids.shape[0]):
        emitted = ids[b, : int(n[b]) + 1].tolist()
        if any(not V - 3 <= y < V for y in emitted):
            problems.append(f"request {b} emitted {emitted}, but ids below {V - 3} hold about 1e-10 of the mass")
    return problems
