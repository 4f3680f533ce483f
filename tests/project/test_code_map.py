"""The code map (CONTRIBUTING.md) kept true: floors, what each may import, no cycles.

The import graph is read from the source with ``ast``, every ``import`` and
``from ... import`` counted, those inside function bodies too (an import
moved into a function to dodge a cycle is still a dependency).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "src" / "torchsleuth"

# Low to high. A module may import its own package, and any package on a lower
# floor; never one on a higher floor, nor a sibling package on its own floor.
FLOORS = (
    ("errors", "_version", "dtypes", "devices", "codec", "names", "paths"),
    ("cases",),
    ("config", "run", "workers"),
    ("search",),
    ("judge",),
    ("scripts",),
    ("oracles",),
    ("engine",),
    ("shrink",),
    ("store",),
    ("report",),
    ("frame",),
    ("sweep", "optim", "shard"),
    ("drill", "check", "watch"),
    ("cli", "api", "pytest_plugin"),
    ("__main__",),
)
# Siblings on one floor that may import each other (config reads cases' records,
# run reads config's; the base floor's modules are leaves of one kind).
SIBLINGS_ALLOWED = {("run", "config"), ("devices", "errors"), ("dtypes", "errors"), ("names", "errors"), ("dtypes", "names"),
                    ("paths", "errors")}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every torchsleuth module ``path`` imports, at any depth of its code."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == root.name}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != root.name:
                continue
            # ``from . import engine`` imports a module; ``from .engine import run_unit`` a name of one
            found |= {f"{target}.{a.name}" if _is_module(f"{target}.{a.name}", root) else target for a in node.names}
    return found


def _is_module(name: str, root: Path) -> bool:
    relative = Path(*name.split(".")[1:])
    return (root / relative).with_suffix(".py").exists() or (root / relative / "__init__.py").exists()


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    return {module_name(p, root): imports_of(p, root) for p in sorted(root.rglob("*.py"))}


def top(module: str) -> str:
    """The part of the code map a module is in: ``torchsleuth.oracles.sizes.oracle`` -> ``oracles``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "api"


def floor(module: str) -> int:
    for level, names in enumerate(FLOORS):
        if top(module) in names:
            return level
    raise AssertionError(f"{module} is on no floor of the code map: add its package to FLOORS (and CONTRIBUTING.md)")


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Imports that go up the floors, across siblings, or between two oracles."""
    bad = []
    for source, targets in edges.items():
        for target in sorted(targets):
            a, b = top(source), top(target)
            if a == b:
                if a == "oracles" and _oracle(source) and _oracle(target) and _oracle(source) != _oracle(target):
                    bad.append(f"{source} imports {target}: one oracle never imports another (share through judge/ or run/)")
                continue
            if floor(target) > floor(source):
                bad.append(f"{source} imports {target}: {b} is on a higher floor than {a}")
            elif floor(target) == floor(source) and (a, b) not in SIBLINGS_ALLOWED:
                bad.append(f"{source} imports {target}: {a} and {b} are siblings on one floor")
    return bad


def _oracle(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "oracles" else ""


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm), and self-imports."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = itertools.count()

    def visit(v):
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_goes_up_the_floors():
    assert violations(graph()) == []


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_every_package_is_on_the_map():
    for module in graph():
        floor(module)


@pytest.mark.parametrize("plant, expected", [
    ("from ..engine import run_case\n", "torchsleuth.judge.compare imports torchsleuth.engine: engine is on a higher floor than judge"),
    ("from ...report import repro\n", "torchsleuth.oracles.sizes.oracle imports torchsleuth.report.repro: report is on a higher floor"),
    ("from ..alias import forms\n", "torchsleuth.oracles.sizes.oracle imports torchsleuth.oracles.alias.forms: one oracle never imports another"),
])
def test_a_planted_upward_import_fails(tmp_path, plant, expected):
    """The check itself: copy the tree, plant one upward import, and it is named."""
    import shutil

    copy = tmp_path / "torchsleuth"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / ("judge/compare.py" if plant.startswith("from ..e") else "oracles/sizes/oracle.py")
    target.write_text(target.read_text() + "\n\ndef _planted():\n    " + plant)
    found = violations(graph(copy))
    assert any(line.startswith(expected) for line in found), found


def test_a_planted_cycle_fails(tmp_path):
    import shutil

    copy = tmp_path / "torchsleuth"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "cases" / "records.py").write_text((copy / "cases" / "records.py").read_text() + "\nfrom . import select  # planted\n")
    assert any("torchsleuth.cases.records" in c and "torchsleuth.cases.select" in c for c in cycles(graph(copy)))


def test_no_module_is_over_the_size_limit():
    """STYLE.md: small modules; ~400 lines is where one splits."""
    big = {module_name(p): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 440}
    assert big == {}
