"""transformers' ``_speculative_sampling`` as a kernel (``specverify.adapters.transformers:speculative_sampling``).

No stand-ins: every test calls the installed transformers (the ``specverify[transformers]`` extra, which
CI installs: without it these tests fail with ImportError, they are not skipped). The two declared
deviations are tested as what they are, so that a transformers that fixes either fails here and the
declaration gets removed.
"""

from __future__ import annotations

import pytest
import torch

from reference import Noise, SpecBatch
from specverify.checks import KNOWN, PASS, run_check
from specverify.strategies import get_profile

SPEC = "specverify.adapters.transformers:speculative_sampling"
SMOKE = get_profile("smoke")
INF = float("inf")


@pytest.fixture(scope="module")
def kernel():
    from specverify.registry import get_backend
    return get_backend(SPEC)


@pytest.mark.parametrize("case", ["standard", "bulk"])
def test_the_kernel_agrees_with_the_reference_under_injected_noise(kernel, case):
    """Under injected noise the function's decisions are the reference's, token for token (SPEC 4.1): the
    noise stands in for its own draws, so any other rule than SPEC 3's standard one shows here."""
    result = run_check(kernel, "differential_injected", case, SMOKE)
    assert result.status == PASS, result.line()


def test_zero_draft_requests_emit_one_token(kernel):
    """k = 0 is legal (SPEC 1) though transformers never calls the function so: with the drafts alone as
    candidate_input_ids its ``[:, -0:]`` slice is empty and it samples the bonus row, as the reference."""
    result = run_check(kernel, "zero_draft_layouts", "layouts", SMOKE)
    assert result.status == PASS, result.line()


@pytest.mark.parametrize("check", ["batch_invariance", "determinism"])
def test_its_seeded_stream_is_per_request_and_reproducible(kernel, check):
    """Seeded calls seed the global generator with the request's own seed for its call: a request's output
    does not depend on the batch around it, and the same seed gives the same output (SPEC 4.4)."""
    result = run_check(kernel, check, "random", SMOKE)
    assert result.status == PASS and "seeded" in result.covered, result.line()


def test_its_own_stream_follows_the_target_law(kernel):
    """transformers' own draws (seeded path), checked statistically on a q that gives mass outside p's
    support: the emitted token at each position ~ p, by chi-square at the smoke profile's per-check alpha
    (3.8e-5, a family of 1e-3), which detects a total variation of about 0.26 at position 0 with power 0.99
    (the check states its det99 per position; later positions see fewer samples)."""
    result = run_check(kernel, "token_distribution", "masked_support", SMOKE)
    assert result.status == PASS and "seeded" in result.covered, result.line()
    assert result.alpha < 1e-4 and result.detectable_by_position[0] < 0.3


def test_declared_deviations_are_what_fails(kernel):
    """The boundary case, the boundary coins' chains and the non-finite rows fail only as declared (KNOWN, never a
    pass): any other divergence there would still fail the run. At coins 2^-24 and 1 - 2^-24, and on the trees,
    nothing is declared: those pass or are n/a."""
    for check, case in (("differential_injected", "boundary"), ("boundary_coins", "zero_mass_drafts"),
                        ("nonfinite_rows", "rows")):
        result = run_check(kernel, check, case, SMOKE)
        assert result.status == KNOWN, result.line()
    assert "every uniform at 0 (injected)" in run_check(kernel, "boundary_coins", "zero_mass_drafts", SMOKE).message


def _excluded_draft():
    """One request, V = 4: the draft 3 is outside the target's support (logit -inf: p(3) = 0) and the
    drafter gave it q(3) = 0.5."""
    candidate_logits = torch.log(torch.tensor([[[0.5, 0.0, 0.0, 0.5]]]))
    new_logits = torch.tensor([[[1.0, 0.0, 0.0, -INF], [1.0, 0.0, 0.0, 0.0]]])
    return torch.tensor([[3]]), candidate_logits, 1, new_logits


def test_a_zero_uniform_accepts_a_draft_the_target_excludes():
    """The real defect declared for the boundary case, replayed on transformers' own stream: torch.rand is
    0.0 after seed 1 and 2,753,120 draws, and ``r <= p / q`` then accepts a draft of probability 0.
    When transformers fixes it (``r < p / q``), this fails: remove the deviation."""
    from transformers.generation.utils import _speculative_sampling
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        torch.rand(2_753_120)
        tokens, accepted = _speculative_sampling(*_excluded_draft())
    assert int(accepted) == 1 and int(tokens[0, 0]) == 3
    with torch.random.fork_rng(devices=[]):     # any other draw rejects it
        torch.manual_seed(1)
        tokens, accepted = _speculative_sampling(*_excluded_draft())
    assert int(accepted) == 0 and int(tokens[0, 0]) != 3


def test_an_empty_residual_makes_speculative_sampling_raise():
    """Found by reading (docs/kernels.md), out of the harness's reach through log q: an assistant whose logits
    are the target's but for one ulp has p <= q everywhere in float32 with p(0) < q(0), so p(0) / q(0) is
    1 - 1.2e-7. torch.rand's largest draw, 1 - 2^-24 (after seed 1 and 44,131,175 draws), rejects token 0, the
    residual clamp(p - q, min=0) is zero everywhere, and dividing it by its sum makes torch.multinomial raise,
    where SPEC 3 samples p. Any other draw accepts. When transformers falls back to p, this fails: say so in
    docs/kernels.md."""
    from transformers.generation.utils import _speculative_sampling
    target = torch.tensor([-0.40334352850914, -0.5966353416442871, 0.18203648924827576])
    assistant = target.clone()
    assistant[0] = torch.nextafter(target[0], torch.tensor(float("inf")))
    call = (torch.tensor([[0]]), assistant[None, None, :], 1, torch.stack([target, target])[None])
    p, q = target.softmax(-1), assistant.softmax(-1)
    assert bool((p <= q).all()) and float(p[0] / q[0]) < 1 - 2 ** -24
    with torch.random.fork_rng(devices=[]), pytest.raises(RuntimeError, match="probability tensor contains"):
        torch.manual_seed(1)
        torch.rand(44_131_175)
        _speculative_sampling(*call)
    with torch.random.fork_rng(devices=[]):     # any other draw accepts it
        torch.manual_seed(1)
        tokens, accepted = _speculative_sampling(*call)
    assert int(accepted) == 1 and int(tokens[0, 0]) == 0


def test_a_nan_row_raises_runtime_error_from_multinomial(kernel):
    """The documented behaviour declared for nonfinite_rows: a NaN target row makes the residual NaN and
    torch.multinomial refuses it, on the seeded path and, through the stand-in's same refusal, injected."""
    logits = torch.tensor([[float("nan"), 0.0, 0.0], [0.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    batch = SpecBatch(torch.tensor([2]), torch.tensor([1, 2]), logits, torch.tensor([[0.2, 0.6, 0.2]] * 2),
                      torch.tensor([1.0]), allow_nonfinite=True)
    noise = Noise(torch.tensor([0.99, 0.5]), torch.ones(1, 3))
    for kwargs in (dict(seed=0), dict(noise=noise)):
        with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan`"):
            kernel(batch, **kwargs)


def test_injected_noise_is_placed_and_seeded_calls_leave_the_callers_stream(kernel):
    """The uniform decides as given (u = 0.99 rejects a draft with p / q = 0.5, u = 0.25 accepts it), the
    exponentials pick the emitted token, and a seeded call leaves the global generator as it found it."""
    logits = torch.log(torch.tensor([[0.25, 0.25, 0.5], [0.1, 0.1, 0.8]]))
    batch = SpecBatch(torch.tensor([1]), torch.tensor([2]), logits, torch.tensor([[0.0, 0.0, 1.0]]),
                      torch.tensor([1.0]))
    rejected = kernel(batch, noise=Noise(torch.tensor([0.99]), torch.tensor([[1.0, 0.01, 1.0]])))
    assert rejected.token_ids.tolist() == [[1, -1]] and rejected.num_accepted.tolist() == [0]
    accepted = kernel(batch, noise=Noise(torch.tensor([0.25]), torch.tensor([[0.001, 1.0, 1.0]])))
    assert accepted.token_ids.tolist() == [[2, 0]] and accepted.num_accepted.tolist() == [1]
    state = torch.get_rng_state()
    kernel(batch, seed=5)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_changed_signature_is_an_import_error(monkeypatch):
    """A transformers whose verifier takes other parameters fails on load, naming the function and both
    parameter lists, never with a TypeError deep in a call."""
    import transformers.generation.utils as utils

    from specverify.adapters.transformers_kernel import load_function
    monkeypatch.setattr(utils, "_speculative_sampling", lambda candidate_input_ids, candidate_logits, new_logits: None)
    with pytest.raises(ImportError, match="_speculative_sampling takes .*new_logits.*candidate_length"):
        load_function()
