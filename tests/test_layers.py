"""The package's layout as a contract: stages, no import cycles, modules of a readable size.

``lint-imports`` (CI) checks the stage contracts in pyproject.toml; these tests keep their list of
known exceptions from growing and check what import-linter does not: cycles between single modules,
deferred imports included (grimp reads imports inside functions too), and module length.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_nvlink"

# Known exceptions still to remove: these numbers may only go down.
KNOWN_IGNORED_IMPORTS = 0
KNOWN_CYCLES: list[set[str]] = []
KNOWN_LONG_MODULES: set[str] = set()
MAX_LINES = 500


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    assert isinstance(contracts, list)
    return contracts


def test_the_stage_contracts_are_configured() -> None:
    ids = {contract["id"] for contract in _contracts()}
    assert ids == {"stages", "sources", "judges-blind", "renderers", "pytest-glue", "acyclic"}


def test_known_violations_only_shrink() -> None:
    ignored = [entry for contract in _contracts() for entry in contract.get("ignore_imports", [])]  # type: ignore[attr-defined]
    assert len(ignored) <= KNOWN_IGNORED_IMPORTS, ignored
    if len(ignored) < KNOWN_IGNORED_IMPORTS:
        pytest.fail(f"{len(ignored)} ignored imports left: lower KNOWN_IGNORED_IMPORTS to it")


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if at < len(edges[node]):
                work.append((node, at + 1))
                nxt = edges[node][at]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return groups


def test_no_import_cycles_between_modules_deferred_imports_included() -> None:
    graph = grimp.build_graph("pytest_nvlink")
    cycles = _cycles(graph)
    unknown = [sorted(group) for group in cycles if group not in KNOWN_CYCLES]
    assert not unknown, f"import cycles: {unknown}"
    gone = [sorted(group) for group in KNOWN_CYCLES if group not in cycles]
    assert not gone, f"cycles removed: take them out of KNOWN_CYCLES: {gone}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [{"p.a", "p.b"}]


def test_modules_stay_readable() -> None:
    long = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    over = {name for name, lines in long.items() if lines > MAX_LINES}
    assert over <= KNOWN_LONG_MODULES, {name: long[name] for name in over - KNOWN_LONG_MODULES}
    shortened = KNOWN_LONG_MODULES - over
    assert not shortened, f"now within {MAX_LINES} lines: take them out of KNOWN_LONG_MODULES: {shortened}"


def test_the_top_level_keeps_only_the_package_face() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "cli.py", "launch.py", "verdict.py"]
