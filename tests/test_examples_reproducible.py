"""A check draws the same examples whatever the process imported before it (SPEC 5: a run is reproducible bit
for bit). Hypothesis mixes the constants written in every local module loaded so far into its draws, so in a
pytest-xdist worker a check's examples followed whichever tests ran there first; specverify.checks.common turns
that off. Each draw runs in a fresh interpreter, once as it is and once after loading a module full of numbers."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAW = """
import hashlib, sys
if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
    import numbers_galore  # noqa: F401
from specverify.checks.agreement import _case_strategy
from specverify.checks.common import run_examples
from specverify.kernels.cpu import CpuBackend
from specverify.strategies import get_profile

profile = get_profile("ci")
seen = []
run_examples(_case_strategy("boundary", profile, CpuBackend.capabilities), profile,
             lambda drawn: seen.append(hashlib.sha256(drawn[0].batch.target_logits.numpy().tobytes()).hexdigest()))
print(" ".join(seen))
"""


def _draws(*argv: str) -> list[str]:
    run = subprocess.run([sys.executable, "-c", DRAW, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.split()


def test_a_checks_examples_do_not_depend_on_the_modules_loaded_before_it(tmp_path):
    """The boundary case's examples, alone and after a module of 600 integer and float constants: the same
    batches, in the same order."""
    numbers = ", ".join([str(3 * i + 1) for i in range(300)] + [repr(0.001 * (i + 1) ** 1.5) for i in range(300)])
    (tmp_path / "numbers_galore.py").write_text(f"NUMBERS = ({numbers})\n")
    alone, after = _draws(), _draws(str(tmp_path))
    assert len(alone) >= 5
    assert alone == after
