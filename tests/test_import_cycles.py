"""No import cycle among the modules of reference/ and specverify/.

Every import statement counts, also one inside a function or under ``if TYPE_CHECKING``: a deferred
import hides a cycle from the interpreter, it does not remove the dependency. The graph is read from
the source with ``ast``, nothing is imported. An edge runs from a module to every module its imports
load: the named module, the submodules named in ``from package import name``, and the packages
above them (``import a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first). Relative
imports are resolved against the importing module's package. A module importing a package it lives
in (``from reference import philox`` inside ``reference/batch.py``) is not an edge: that package is
already being imported when the module runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reference", "specverify")


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file under the packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _ancestors(name: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b']."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _package_of(name: str, path: Path) -> str:
    """The package a relative import of module ``name`` is resolved against."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported_names(name: str, path: Path) -> list[tuple[str, int]]:
    """(absolute module or attribute name, line) for every import statement in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(name, path).split(".")
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def import_graph(root: Path, packages=PACKAGES) -> dict[str, dict[str, int]]:
    """module -> {module it loads: line of the first import that loads it}, within the packages."""
    modules = module_files(root, packages)
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        own_packages = set(_ancestors(name))
        for target, line in imported_names(name, path):
            for loaded in _ancestors(target) + [target]:
                if loaded in modules and loaded != name and loaded not in own_packages:
                    graph[name][loaded] = min(line, graph[name].get(loaded, line))
    return graph


def _reachable(graph: dict[str, dict[str, int]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _shortest_path(graph: dict[str, dict[str, int]], start: str, goal: str) -> list[str]:
    """Breadth-first: the shortest chain of imports from ``start`` to ``goal`` (both included)."""
    parent, frontier = {start: None}, [start]
    while frontier and goal not in parent:
        nxt = []
        for node in frontier:
            for target in sorted(graph[node]):
                if target not in parent:
                    parent[target] = node
                    nxt.append(target)
        frontier = nxt
    path = [goal]
    while path[-1] != start:
        path.append(parent[path[-1]])
    return path[::-1]


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle per strongly connected group of modules, each as [m0, m1, ..., m0]."""
    reach = {m: _reachable(graph, m) for m in graph}
    done, found = set(), []
    for m in sorted(graph):
        if m in done or m not in reach[m]:
            continue
        group = {n for n in reach[m] if m in reach[n]}
        done |= group
        closing = min((n for n in group if m in graph[n]), key=lambda n: len(_shortest_path(graph, m, n)))
        found.append(_shortest_path(graph, m, closing) + [m])
    return found


def describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
    return "import cycle:\n    " + "\n    ".join(steps)


def test_no_import_cycle():
    graph = import_graph(ROOT)
    found = cycles(graph)
    assert not found, "\n".join(describe(graph, c) for c in found)


# ---- the detector itself, on small trees ----------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


DETECTOR_CASES = {
    "an import inside a function": ({
        "reference/__init__.py": "",
        "reference/a.py": "from reference import b\n",
        "reference/b.py": "def f():\n    from reference.a import g\n",
    }, [["reference.a", "reference.b", "reference.a"]]),
    "relative imports": ({
        "specverify/__init__.py": "",
        "specverify/kernels/__init__.py": "",
        "specverify/kernels/cpu.py": "from ..backends import Backend\n",
        "specverify/backends.py": "from .kernels import cpu\n",
    }, [["specverify.backends", "specverify.kernels.cpu", "specverify.backends"]]),
    "the packages an import runs": ({
        "specverify/__init__.py": "",
        "specverify/checks/__init__.py": "from specverify.checks import common\nimport specverify.kernels.cpu\n",
        "specverify/checks/common.py": "",
        "specverify/kernels/__init__.py": "",
        "specverify/kernels/cpu.py": "import specverify.checks.common\n",
    }, [["specverify.checks", "specverify.kernels.cpu", "specverify.checks"]]),
    "a module importing its own package (no cycle)": ({
        "reference/__init__.py": "from reference.batch import Noise\nfrom reference import philox\n",
        "reference/batch.py": "from reference import philox\n",
        "reference/philox.py": "import reference\n",
    }, []),
}


@pytest.mark.parametrize("name", sorted(DETECTOR_CASES))
def test_detector_on_a_small_tree(name, tmp_path):
    files, expected = DETECTOR_CASES[name]
    assert cycles(import_graph(_tree(tmp_path, files))) == expected


def test_detector_names_the_line_that_closes_the_cycle(tmp_path):
    graph = import_graph(_tree(tmp_path, DETECTOR_CASES["an import inside a function"][0]))
    assert "reference.b (line 2) -> reference.a" in describe(graph, cycles(graph)[0])
