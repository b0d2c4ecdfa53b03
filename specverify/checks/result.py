"""The structured verdict every check returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

PASS, FAIL, NOT_APPLICABLE, NOT_RUN, KNOWN = "pass", "fail", "n/a", "not run", "known deviation"


@dataclass
class CheckResult:
    """One check of one backend on one case.

    status: "pass", "fail", "not run" (a stopped run), "n/a" (the backend does not declare what the
    check needs; the reason is in ``message``; n/a is never a pass) or "known deviation" (a failure a
    declared deviation matches: neither a pass nor a new failure; ``deviation`` holds its reason; a passed
    check holds in ``intermittent`` the reasons of declared intermittent deviations this run did not meet).
    Statistical checks fill statistic, p_value, alpha, samples and the power they have:
    ``detectable_by_position`` [j] is the smallest deviation at position j detected with probability 0.99
    at alpha, ``detectable`` the worst (largest) of them, ``detectable_measure`` what that deviation is
    ("tv": total-variation distance of the token distribution; "acceptance": shift of the acceptance
    probability; "rate": shift of the mean joint acceptance rate). ``sampling`` holds a statistical check's
    plan (copies; per position its reach, det99 target and expected samples) and speed (samples/s, the
    backend's share of the time). ``covered`` lists what the check's calls exercised (method, noise path,
    greedy).
    A failure carries ``counterexample`` (Python that rebuilds the failing call, when one call shows
    it) and, once a face has written it, ``reproducer``: the path of its reproducer file, and
    ``replay``: the command that replays it.
    """

    check: str
    case: str
    backend: str
    kind: str                          # "exact", "statistical" or "structural"
    status: str
    message: str = ""
    statistic: float | None = None
    p_value: float | None = None
    alpha: float | None = None
    samples: int = 0
    detectable: float | None = None
    detectable_measure: str | None = None
    detectable_by_position: list | None = None
    counterexample: str | None = None
    reproducer: str | None = None
    replay: str | None = None
    deviation: str | None = None       # the reason of a declared deviation of this check and case
    intermittent: str | None = None    # a passed check's declared intermittent deviations, not met in this run
    seconds: float = 0.0
    covered: list = field(default_factory=list)
    sampling: dict | None = None       # statistical: the copies' plan per position and the sampling speed
    gpu: str | None = None             # the GPU its worker was pinned to (CUDA_VISIBLE_DEVICES), if any

    def fail(self, message: str, counterexample: str | None = None) -> None:
        self.status, self.message, self.counterexample = FAIL, message, counterexample

    @property
    def passed(self) -> bool:
        return self.status != FAIL

    @property
    def id(self) -> str:
        return f"{self.check}[{self.case}]"

    def to_json(self) -> dict:
        d = asdict(self)
        for key, value in d.items():
            if isinstance(value, float) and not math.isfinite(value):
                d[key] = str(value)
        if d["detectable_by_position"]:
            d["detectable_by_position"] = [v if math.isfinite(v) else str(v) for v in d["detectable_by_position"]]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CheckResult":
        def number(v):
            return float(v) if isinstance(v, str) else v
        d = dict(d)
        for key in ("statistic", "p_value", "alpha", "detectable"):
            d[key] = number(d.get(key))
        if d.get("detectable_by_position"):
            d["detectable_by_position"] = [number(v) for v in d["detectable_by_position"]]
        return cls(**d)

    def line(self) -> str:
        """One report line: verdict, statistic, p-value, samples, detectable distance."""
        def fmt(x, spec):
            return "-" if x is None else format(x, spec)
        verdict = {PASS: "PASS", FAIL: "FAIL", NOT_APPLICABLE: "n/a ", NOT_RUN: "----", KNOWN: "KNWN"}[self.status]
        power = fmt(self.detectable, '.4f') + (f" {self.detectable_measure}" if self.detectable_measure else "")
        text = (f"{verdict}  {self.id:<46} stat={fmt(self.statistic, '.4g'):>9}  p={fmt(self.p_value, '.3g'):>8}"
                f"  alpha={fmt(self.alpha, '.2g'):>7}  n={self.samples:>8}  det99={power:<17}"
                f"  {self.seconds:6.2f}s")
        if self.message:
            text += f"\n      {self.message}"
        if self.sampling and self.sampling.get("samples_per_second"):
            rate, share = self.sampling["samples_per_second"], self.sampling.get("backend_share") or 0.0
            text += (f"\n      sampled {self.sampling['copies']:,} copies in {self.sampling['launches']} launch(es): "
                     f"{rate:,.0f} samples/s, {share:.0%} of the time in the backend")
            if self.sampling.get("parts"):
                text += f"; {self.sampling['parts']} parts side by side" + (f" on GPUs {self.gpu}" if self.gpu else "")
            if self.sampling.get("budget_cut"):
                text += f"; budget: {self.sampling['budget_cut']}"
        if self.counterexample and self.status == FAIL:
            text += "\n      counterexample:\n" + "\n".join(f"        {line}" for line in self.counterexample.splitlines())
        if self.reproducer and self.status == FAIL:
            text += f"\n      reproducer: {self.reproducer}\n      replay: {self.replay}"
        return text
