"""Differential checks: a backend against the reference under shared noise, on Hypothesis batches.

differential_injected  the backend takes the reference's Noise as given
differential_seeded    the backend draws its own noise from per-request seeds; exact only when its
                       stream is the reference's Philox stream (capabilities.seeded_stream == "philox")
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from reference import Noise

from reference.philox import seeded_noise
from specverify.checks.common import CheckFailure, fail, not_applicable, on_device, run_examples, \
    structure_problems, timed
from specverify.checks.differential import ambiguous_bound, compare_to_reference
from specverify.checks.cases import STAT_CASES
from specverify.strategies import Example, Profile, spec_examples

SYNTHETIC_RATES = (0.0, 0.3, 0.75, 1.0)
DIFFERENTIAL_CASES = ("standard", "synthetic", "bulk", "replicated", "large_vocab")
REPLICATED_MAX_COPIES = 20_000   # the reference checks these one request at a time


def _case_strategy(case: str, profile: Profile):
    """(example, call kwargs) for a differential case."""
    if case == "large_vocab":
        examples = st.one_of(*(spec_examples(profile, max_vocab=v, max_requests=profile.large_requests)
                               for v in profile.large_vocabs))
    elif case == "bulk":
        examples = spec_examples(profile, max_vocab=64, min_requests=profile.bulk_requests // 2,
                                 max_requests=profile.bulk_requests)
    else:
        examples = spec_examples(profile)
    if case == "synthetic":
        kwargs = st.builds(lambda r: dict(method="synthetic", synthetic_acceptance_rate=r,
                                          num_speculative_steps=profile.max_draft), st.sampled_from(SYNTHETIC_RATES))
    else:
        kwargs = st.just(dict(method="standard"))
    return st.tuples(examples, kwargs)


def _replicated_examples(profile: Profile, backend):
    """Every statistical case replicated into one batch: thousands of decisions on inputs built to be
    sensitive (bf16-rounding-prone q, masked support), compared exactly instead of statistically."""
    copies = max(1, min(profile.stat_copies, REPLICATED_MAX_COPIES))
    for case in STAT_CASES:
        if case.method not in backend.capabilities.methods:
            continue
        g = torch.Generator().manual_seed(len(case.name) * 7919 + copies)
        batch = case.batch(copies, g)
        seeds = torch.randint(0, 2 ** 62, (copies,), generator=g, dtype=torch.int64)
        yield Example(batch, Noise.draw(batch, g), seeds, f"replicated statistical case {case.name!r} x {copies}"), \
            case.call_kwargs()


def case_applies(case: str, profile: Profile, backend) -> str | None:
    """None if the case applies, else why not."""
    if case == "large_vocab" and not profile.large_vocabs:
        return f"profile {profile.name!r} has no large-vocabulary sizes"
    if case == "synthetic" and "synthetic" not in backend.capabilities.methods:
        return "backend does not declare the synthetic method"
    return None


def check_differential(backend, case: str, profile: Profile, *, seeded: bool):
    name = "differential_seeded" if seeded else "differential_injected"
    with timed(name, case, backend, "exact") as result:
        caps = backend.capabilities
        why = case_applies(case, profile, backend)
        path = "seeded" if seeded else "injected"
        if why is None and path not in caps.noise:
            why = f"backend does not declare {path} noise"
        if why is None and seeded and caps.seeded_stream != "philox":
            why = "backend's seeded stream is its own (not reproducible by the reference): checked statistically"
        if why is None and profile.device not in caps.devices:
            why = f"backend does not run on {profile.device}"
        if why:
            return not_applicable(result, why)
        totals = {"decisions": 0, "ambiguous": 0, "examples": 0}
        worst = []

        def body(drawn):
            example, kwargs = drawn
            batch, noise = example.batch, example.noise
            if seeded:
                noise = seeded_noise(example.seeds, batch.num_draft_tokens, batch.vocab_size)
            dev_batch, dev_noise = on_device(batch, None if seeded else noise, profile.device)
            got = backend(dev_batch, noise=dev_noise, seed=example.seeds if seeded else None, **kwargs)
            problems = structure_problems(batch, got)
            if problems:
                raise CheckFailure("output structure: " + "; ".join(problems))
            cmp = compare_to_reference(batch, got, noise, tol=caps.ambiguity_margin, **kwargs)
            if cmp.real:
                raise CheckFailure(f"{len(cmp.real)} real divergence(s) from the reference; first: {cmp.real[0]}")
            totals["decisions"] += cmp.decisions
            totals["ambiguous"] += len(cmp.ambiguous)
            totals["examples"] += 1
            worst.extend(str(d) for d in cmp.ambiguous[:1])

        if case == "replicated":
            message = counterexample = None
            for drawn in _replicated_examples(profile, backend):
                try:
                    body(drawn)
                except CheckFailure as exc:
                    message, counterexample = str(exc), drawn[0].description
                    break
        else:
            examples = {"large_vocab": max(3, profile.examples // 5), "bulk": profile.bulk_examples}.get(case)
            message, counterexample = run_examples(_case_strategy(case, profile), profile, body, examples=examples,
                                                   shrink=case not in ("bulk", "large_vocab"))
        result.samples = totals["decisions"]
        if message:
            return fail(result, message, counterexample)
        bound = ambiguous_bound(totals["decisions"])
        result.statistic = float(totals["ambiguous"])
        result.message = (f"{totals['examples']} examples, {totals['decisions']} decisions, "
                          f"{totals['ambiguous']} ambiguous (bound {bound})")
        if totals["ambiguous"] > bound:
            raise CheckFailure(result.message + f"; e.g. {worst[0]}")
        return result
    return result


def check_differential_injected(backend, case: str, profile: Profile):
    """Same tokens as the reference given the same injected Noise (SPEC 4.1)."""
    return check_differential(backend, case, profile, seeded=False)


def check_differential_seeded(backend, case: str, profile: Profile):
    """Same tokens as the reference given the same per-request seeds (Philox stream)."""
    return check_differential(backend, case, profile, seeded=True)


__all__ = ["DIFFERENTIAL_CASES", "check_differential_injected", "check_differential_seeded"]
