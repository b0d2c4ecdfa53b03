"""The structured verdict every check returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"


@dataclass
class CheckResult:
    """One check of one backend on one case.

    status: "pass", "fail" or "n/a" (the backend does not declare what the check needs; the reason
    is in ``message``). Statistical checks fill statistic, p_value, alpha, samples and
    detectable_tv (smallest TV distance detected with power 0.99 at alpha and this sample size).
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
    detectable_tv: float | None = None
    counterexample: str | None = None
    seconds: float = 0.0

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
        return d

    def line(self) -> str:
        """One report line: verdict, statistic, p-value, samples, detectable distance."""
        def fmt(x, spec):
            return "-" if x is None else format(x, spec)
        verdict = {PASS: "PASS", FAIL: "FAIL", NOT_APPLICABLE: "n/a "}[self.status]
        text = (f"{verdict}  {self.id:<46} stat={fmt(self.statistic, '.4g'):>9}  p={fmt(self.p_value, '.3g'):>8}"
                f"  alpha={fmt(self.alpha, '.2g'):>7}  n={self.samples:>8}  tv99={fmt(self.detectable_tv, '.4f'):>7}"
                f"  {self.seconds:6.2f}s")
        if self.message:
            text += f"\n      {self.message}"
        if self.counterexample and self.status == FAIL:
            text += f"\n      counterexample: {self.counterexample}"
        return text
