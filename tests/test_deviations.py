"""Declared deviations: a known failure is reported as such and keeps the run green, a new failure in
the same check still fails it, and a deviation that stops occurring is reported for removal."""

from dataclasses import replace

import pytest

from specverify.backends import Deviation
from specverify.checks import FAIL, KNOWN, PASS, run_check
from specverify.checks.deviations import MethodDeviation, load_deviations, matching
from specverify.cli import main
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import DraftProbsDropped, GreedyHighestIndexTie, ResidualFromP
from specverify.strategies import get_profile
from specverify.verdict import verdict

TIES = Deviation("differential_injected", "*", "greedy ties resolve to the highest index, by design",
                 r"greedy argmax( \(tree\))? margin inf")
TOML = '''[[deviation]]
check = "differential_injected"
case = "*"
reason = "greedy ties resolve to the highest index, by design"
match = "greedy argmax( \\\\(tree\\\\))? margin inf"
'''


class TiesAndDroppedDraftProbs(GreedyHighestIndexTie, DraftProbsDropped):
    """The declared greedy tie-break plus a second, undeclared bug in the same check."""

    name = "ties_and_dropped_draft_probs"


class DeclaresItsTies(GreedyHighestIndexTie):
    """The backend itself declares its greedy tie-break as a known deviation."""

    name = "declares_its_ties"
    capabilities = replace(GreedyHighestIndexTie.capabilities, deviations=(TIES,))


def test_declared_deviation_keeps_the_run_green_and_is_reported(tmp_path, capsys):
    """The tie-break mutant with the deviation file: every failure of the check matches it, so the
    run passes with the check reported as a known deviation, never as a pass."""
    path = tmp_path / "deviations.toml"
    path.write_text(TOML)
    spec = "specverify.mutants.samplers:GreedyHighestIndexTie"
    status = main(["check", spec, "--checks", "differential_injected", "--profile", "smoke",  # the verdict, not power
                   "--deviations", str(path), "-n", "1", "--failures-dir", str(tmp_path / "failures")])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "KNWN  differential_injected[standard]" in printed and "known deviations (" in printed
    assert "known deviation(s)" in printed.splitlines()[-1]


def test_new_failure_in_a_check_with_a_declared_deviation_still_fails():
    """A second bug planted in the same check (draft probabilities dropped) is not excused."""
    result = run_check(TiesAndDroppedDraftProbs(), "differential_injected", "standard", get_profile("ci"), (TIES,))
    assert result.status == FAIL and "greedy argmax" not in result.message, result.line()


def test_backend_declared_deviation_is_known_and_one_that_does_not_occur_is_reported():
    """A deviation in the backend's Capabilities works as a run's does; declared on the correct CPU
    backend it does not occur, the check passes, and the verdict lists it for removal."""
    known = run_check(DeclaresItsTies(), "differential_injected", "standard", get_profile("ci"))
    assert known.status == KNOWN and known.deviation == TIES.reason, known.line()
    stale = run_check(CpuBackend(), "differential_injected", "standard", get_profile("ci"), (TIES,))
    assert stale.status == PASS and "remove it" in stale.message
    outcome = verdict([known, stale], DeclaresItsTies.capabilities)
    assert outcome.known == {known.id: TIES.reason} and outcome.stale == {stale.id: TIES.reason}
    # a known deviation is not a core check that ran: alone it does not make a run pass
    assert not verdict([known], DeclaresItsTies.capabilities).passed


@pytest.mark.parametrize("text,problem", [
    ('[[deviation]]\ncheck = "differential_injected"\ncase = "*"\nreason = "r"\n', "missing ['match']"),
    ('[[deviation]]\ncheck = "no_such_check"\ncase = "*"\nreason = "r"\nmatch = "x"\n', "unknown check"),
    ('[[deviation]]\ncheck = "determinism"\ncase = "*"\nreason = "r"\nmatch = "("\n', "not a regular expression"),
    ('[[deviation]]\ncheck = "determinism"\ncase = "*"\nreason = ""\nmatch = "x"\n', "reason must be"),
    ('check = "determinism"\n', "expected only [[deviation]] tables"),
])
def test_malformed_deviations_file_is_a_named_error(tmp_path, text, problem):
    path = tmp_path / "d.toml"
    path.write_text(text)
    from specverify.checks import CHECKS
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("(", r"\(")):
        load_deviations(str(path), CHECKS)


# vLLM's synthetic rule emits the residual's sample at a forced rejection: the same divergence text
# ("exponential race") as a standard-rule bug that samples the wrong distribution at a rejection
SYNTHETIC_ONLY = MethodDeviation("differential_injected", "replicated", "vLLM's synthetic forced rejection",
                                 r"REAL: exponential race", method="synthetic")


def test_a_synthetic_deviation_does_not_hide_a_standard_rule_bug_in_replicated():
    """ResidualFromP (the standard rule's rejection sampled from p) in the case that runs every rule: a
    deviation scoped to the synthetic method leaves it failing, where the same deviation unscoped hides it."""
    profile = replace(get_profile("ci"), replicated_copies=200)
    unscoped = Deviation(**{f: getattr(SYNTHETIC_ONLY, f) for f in ("check", "case", "reason", "match")})
    hidden = run_check(ResidualFromP(), "differential_injected", "replicated", profile, (unscoped,))
    assert hidden.status == KNOWN, hidden.line()
    caught = run_check(ResidualFromP(), "differential_injected", "replicated", profile, (SYNTHETIC_ONLY,))
    assert caught.status == FAIL and "exponential race" in caught.message, caught.line()


def test_method_scoped_deviations_match_only_their_method_and_load_from_toml(tmp_path):
    text = "request 0, position 1: expected [4], got [2] (REAL: exponential race margin 0.3)"
    assert matching(text, (SYNTHETIC_ONLY,), "synthetic") is SYNTHETIC_ONLY
    assert matching(text, (SYNTHETIC_ONLY,), "standard") is None
    assert matching(text, (SYNTHETIC_ONLY,)) is None          # method not known: a scoped deviation never applies
    path = tmp_path / "deviations.toml"
    path.write_text(TOML + 'method = "synthetic"\n')
    (loaded,) = load_deviations(str(path))
    assert isinstance(loaded, MethodDeviation) and loaded.method == "synthetic"
    path.write_text(TOML + 'method = "speculative"\n')
    with pytest.raises(ValueError, match="deviation 1: .*method must be one of"):
        load_deviations(str(path))


def test_a_synthetic_deviation_excuses_the_synthetic_calls_of_replicated():
    """The other half: a backend whose synthetic rule alone is wrong (SyntheticDecayIgnored) fails
    replicated without a declaration, and is a known deviation under one scoped to method synthetic, the
    excused divergences naming that method."""
    from specverify.mutants.samplers import SyntheticDecayIgnored
    profile = replace(get_profile("ci"), replicated_copies=200)
    plain = run_check(SyntheticDecayIgnored(), "differential_injected", "replicated", profile)
    assert plain.status == FAIL, plain.line()
    scoped = MethodDeviation("differential_injected", "replicated", "synthetic only", r"REAL", method="synthetic")
    known = run_check(SyntheticDecayIgnored(), "differential_injected", "replicated", profile, (scoped,))
    assert known.status == KNOWN and "(method synthetic)" in known.message, known.line()


FLAKY_TIES = replace(TIES, intermittent=True)


def test_an_intermittent_deviation_not_met_passes_and_is_kept_not_listed_for_removal():
    """A deviation marked intermittent (a defect that reads memory the kernel never writes shows in some runs
    only): where a run meets it the check is a known deviation as before; where it does not, the check passes
    and the verdict lists it as not met this run, not as stale. A lasting deviation beside it is still stale."""
    met = run_check(GreedyHighestIndexTie(), "differential_injected", "standard", get_profile("ci"), (FLAKY_TIES,))
    assert met.status == KNOWN and met.deviation == TIES.reason and met.intermittent is None, met.line()
    unmet = run_check(CpuBackend(), "differential_injected", "standard", get_profile("ci"), (FLAKY_TIES,))
    assert unmet.status == PASS and unmet.deviation is None and unmet.intermittent == TIES.reason, unmet.line()
    assert "did not show in this run" in unmet.message and "remove it" not in unmet.message
    lasting = Deviation("differential_injected", "standard", "another behaviour", "never matched")
    both = run_check(CpuBackend(), "differential_injected", "standard", get_profile("ci"), (FLAKY_TIES, lasting))
    assert both.deviation == lasting.reason and both.intermittent == TIES.reason, both.line()
    outcome = verdict([met, unmet], DeclaresItsTies.capabilities)
    assert outcome.passed and outcome.stale == {} and outcome.unseen == {unmet.id: TIES.reason}
    lines = "\n".join(outcome.lines())
    assert "intermittent deviations this run did not meet (1" in lines and "remove them" not in lines
    assert outcome.to_json()["intermittent_not_seen"] == {unmet.id: TIES.reason}


def test_intermittent_loads_from_toml_as_a_boolean_only(tmp_path):
    """`intermittent = true` in a deviations file marks the entry; any other value is refused by name."""
    path = tmp_path / "deviations.toml"
    path.write_text(TOML + "intermittent = true\n")
    (loaded,) = load_deviations(str(path))
    assert loaded.intermittent is True and loaded.reason == TIES.reason
    path.write_text(TOML + 'intermittent = "sometimes"\n')
    with pytest.raises(ValueError, match="deviation 1: .*intermittent must be true or false"):
        load_deviations(str(path))


class ZeroMassExtraToken(CpuBackend):
    """The CPU backend whose calls under ``rule`` emit, as their extra token, an id the target gives
    probability 0 (a -inf logit), where the row has one: vLLM's synthetic rejection with q = p, as the
    structural check sees it."""

    name = "zero_mass_extra_token"
    rule = "synthetic"

    def _sample(self, batch, *, method, **kwargs):
        out = super()._sample(batch, method=method, **kwargs)
        if method != self.rule:
            return out
        off = batch.logit_offsets().tolist()
        for b in range(batch.num_requests):
            m = int(out.num_accepted[b])
            zero = (batch.target_logits[off[b] + m] == float("-inf")).nonzero().flatten()
            if float(batch.temperature[b]) > 0 and zero.numel():
                out.token_ids[b, m] = zero[0]
        return out


class ZeroMassUnderStandard(ZeroMassExtraToken):
    name = "zero_mass_under_standard"
    rule = "standard"


SYNTHETIC_SUPPORT = MethodDeviation("output_structure", "random", "vLLM's synthetic rejection with q = p",
                                    r"extra token \d+ at position \d+ has probability 0", method="synthetic")


def test_a_structural_failure_of_one_rule_is_excused_for_that_rule_alone():
    """output_structure excuses a declared problem per call, by the call's rule (vLLM's adapters declare their
    synthetic rejection so): the synthetic-rule defect is known under the scoped declaration and fails without
    it; the same defect under the standard rule fails under that declaration."""
    profile = get_profile("ci")
    plain = run_check(ZeroMassExtraToken(), "output_structure", "random", profile, reproducer=False)
    assert plain.status == FAIL and "has probability 0" in plain.message, plain.line()
    known = run_check(ZeroMassExtraToken(), "output_structure", "random", profile, (SYNTHETIC_SUPPORT,))
    assert known.status == KNOWN and "(method synthetic)" in known.message, known.line()
    standard = run_check(ZeroMassUnderStandard(), "output_structure", "random", profile, (SYNTHETIC_SUPPORT,),
                         reproducer=False)
    assert standard.status == FAIL and "has probability 0" in standard.message, standard.line()
