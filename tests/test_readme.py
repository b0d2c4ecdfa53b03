"""Every Python block in README.md runs as written: the README is the first code a user copies."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
DEVIATION_BLOCKS = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)


def test_readme_has_python_blocks():
    """Guards the test below against a README whose blocks stopped being found."""
    assert len(BLOCKS) >= 2 and len(DEVIATION_BLOCKS) >= 1


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index):
    exec(compile(BLOCKS[index], f"README block {index}", "exec"), {})



@pytest.mark.parametrize("index", range(len(DEVIATION_BLOCKS)))
def test_readme_deviations_example_loads(index, tmp_path):
    """The README's deviations file is one ``--deviations`` accepts, naming a real check."""
    from specverify.checks import CHECKS
    from specverify.checks.deviations import load_deviations
    path = tmp_path / "deviations.toml"
    path.write_text(DEVIATION_BLOCKS[index])
    assert load_deviations(str(path), CHECKS)
