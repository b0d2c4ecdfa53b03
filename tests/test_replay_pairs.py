"""Replay that replays: a failure no single call shows (the same call giving two outputs under two
poison fills, or twice) leaves the call itself, with the conditions of each run, and replay makes that
call again under them: the recorded failure, not a new search (issue 27, item 6)."""

import torch

from specverify.checks import FAIL, PASS, run_check
from specverify.checks.repro import load
from specverify.mutants.statistical_only import OwnStreamCpuBackend
from specverify.replay import replay_file
from specverify.strategies import get_profile


class PoisonDependent(OwnStreamCpuBackend):
    """Own seeded stream (no shared noise: no single call can be compared with the reference), and a first
    emitted token that moves when a fresh allocation reads 3 (the plausible poison)."""

    name = "poison_dependent"

    def _sample(self, batch, **kwargs):
        out = super()._sample(batch, **kwargs)
        if int(torch.empty((1,), dtype=torch.int64)[0]) == 3 and batch.vocab_size > 1:
            first = out.token_ids[:, 0]
            moved = torch.where(out.num_accepted == 0, (first + 1) % batch.vocab_size, first)
            out.token_ids[:, 0] = moved
        return out


def test_uninitialised_memory_failure_replays_the_recorded_call_under_both_fills(tmp_path, capsys):
    """The check fails; its reproducer is the failing call with the fills of its two runs; replay on the
    mutant still fails (exit 1), on its clean twin passes (exit 0), without a Hypothesis search."""
    from specverify.checks.repro import write_reproducer
    result = run_check(PoisonDependent(), "uninitialized_memory", "random", get_profile("ci"))
    assert result.status == FAIL, result.line()
    path = write_reproducer(result, tmp_path)
    repro = load(path)
    assert repro.kind == "pair" and repro.conditions == ["deterministic_fill", "plausible_poison"]
    assert repro.call is not None and "the same call made under each of" in open(path[:-3] + ".txt").read()
    assert replay_file(path, f"{__name__}:PoisonDependent") == 1
    assert "STILL FAILS" in capsys.readouterr().out
    assert replay_file(path, "specverify.mutants.statistical_only:OwnStreamCpuBackend") == 0
    assert run_check(OwnStreamCpuBackend(), "uninitialized_memory", "random", get_profile("ci")).status == PASS
