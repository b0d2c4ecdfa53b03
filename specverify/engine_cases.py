"""What an engine check is given (SPEC 8): the sampling settings, the cases, the adapter's protocol, and the exact
law of the first emitted tokens. ``specverify.engines`` declares and runs the checks over them, and re-exports
these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from specverify.checks.result import PASS, CheckResult

LAW_FLOOR = 1e-300      # a divisor's floor where a law may hold zeros


@dataclass(frozen=True)
class Sampling:
    """The engine's sampling settings (SPEC 8): temperature 0 is greedy; 0 / 1 / 0 turn the filters off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        parts += [f"top_k={self.top_k}"] if self.top_k else []
        parts += [f"top_p={self.top_p:g}"] if self.top_p < 1 else []
        parts += [f"min_p={self.min_p:g}"] if self.min_p > 0 else []
        return ", ".join(parts)


@dataclass(frozen=True)
class EngineCase:
    """One engine case: the prompt(s), the sampling, the drafter and its draft schedule, and L, the
    number of emitted tokens whose joint law is tested. ``prompts`` (greedy cases) are all checked."""

    name: str
    prompt: tuple
    sampling: Sampling
    drafter: str = "flat"             # the adapter's name for the drafter model
    draft_tokens: int = 2
    schedule: str = "constant"
    length: int = 2
    prompts: tuple = ()
    doc: str = ""

    def describe(self) -> str:
        drafts = (f"up to {self.draft_tokens} prompt-lookup candidates" if self.drafter == "prompt_lookup" else
                  f"drafter {self.drafter}, {self.draft_tokens} draft token(s), {self.schedule} schedule")
        return f"{self.sampling.describe()}; {drafts}; law of the first " + (
            f"{self.length} tokens" if self.length > 1 else "token")


@runtime_checkable
class Engine(Protocol):
    """What an engine adapter gives (SPEC 8)."""

    name: str
    vocab_size: int
    cases: tuple

    def generate(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        """The engine's speculative loop for one prompt: the ``case.length`` new token ids."""

    def generate_plain(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        """The same engine without speculation."""

    def target_law(self, prefix: tuple, sampling: Sampling):
        """[V] float64: the target's next-token law for ``prefix`` after the engine's own processors."""


def exact_law(engine, prompt: tuple, sampling: Sampling, length: int) -> dict:
    """{sequence of ``length`` token ids: probability} in float64, by enumeration: the product of the
    target's laws along the sequence, one ``target_law`` call per prefix of positive probability."""
    law = {(): 1.0}
    for _ in range(length):
        grown = {}
        for seq, prob in law.items():
            nxt = np.asarray(engine.target_law(tuple(prompt) + seq, sampling), dtype=np.float64)
            if not (np.all(nxt >= 0) and abs(nxt.sum() - 1) < 1e-9):
                raise ValueError(f"{engine.name}.target_law({tuple(prompt) + seq}) is not a distribution: {nxt}")
            for v in np.flatnonzero(nxt > 0):
                grown[seq + (int(v),)] = prob * float(nxt[v])
        law = grown
    return law


def engine_result(engine, check: str, case: EngineCase, kind: str) -> CheckResult:
    """A passing result line for ``check`` on ``case``, which the check fills or fails."""
    return CheckResult(check=check, case=case.name, backend=engine.name, kind=kind, status=PASS)


def drafter_law(engine, case: EngineCase):
    """The drafter's law at the prompt after the case's processors; None: greedy, no drafter law."""
    q = None if case.sampling.greedy or not hasattr(engine, "draft_law") else engine.draft_law(case, case.prompt)
    return None if q is None else np.asarray(q, dtype=np.float64)
