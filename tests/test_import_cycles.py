"""Data flows one way: no import circles among the modules of pipeline/ and bench/.

Every import statement counts, wherever it stands (top level, inside a function, under
``TYPE_CHECKING``): a back-import hidden in a function or a type-checking block is still a circle
in the design, only one Python does not trip over. An import names the module it reads from:
``from pipeline.analysis import fleet`` is ``pipeline.analysis.fleet``; ``from pipeline.analysis
import FleetAnalysis`` is the package ``pipeline.analysis`` (its ``__init__``), and a lazy
package's name (``pipeline.report``'s ``EXPORTS``) is the module that defines it. A parent package
is not an edge of its submodules' imports (``pipeline.analysis.fleet`` importing
``pipeline.analysis.failures`` does not depend on ``pipeline.analysis/__init__``).

``python tests/test_import_cycles.py`` prints the circles it finds.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "bench")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    """``EXPORTS = {"name": "module", ...}`` of a lazy package (pipeline.lazy), else empty."""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "EXPORTS" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {
                ast.literal_eval(k): ast.literal_eval(v)
                for k, v in zip(node.value.keys, node.value.values, strict=True)
            }
    return {}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of these packages it imports (see the module docstring)."""
    files = modules(root)
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in files.items()}
    lazy = {name: _lazy_exports(tree) for name, tree in trees.items()}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, tree in trees.items():
        is_package = files[name].name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:
                        targets.append(f"{base}.{alias.name}")
                    elif alias.name in lazy.get(base, {}):
                        targets.append(f"{base}.{lazy[base][alias.name]}")
                    else:
                        targets.append(base)
            for target in targets:
                if target in files and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative: a deep import chain must not hit the recursion limit
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def test_the_finder_sees_a_circle_through_a_function_and_type_checking(tmp_path):
    package = tmp_path / "pipeline"
    (package / "report").mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pipeline.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from pipeline import a\n")
    (package / "c.py").write_text("from pipeline import a\n")  # into the circle, not part of it
    (package / "report" / "__init__.py").write_text('EXPORTS = {"Section": "sections"}\n')
    (package / "report" / "sections.py").write_text("from .backtest import part\n")
    (package / "report" / "backtest.py").write_text("def part():\n    from pipeline.report import Section\n")
    assert circles(import_graph(tmp_path)) == [
        ["pipeline.a", "pipeline.b"],
        ["pipeline.report.backtest", "pipeline.report.sections"],
    ]


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


if __name__ == "__main__":
    for circle in circles(import_graph()):
        print(" <-> ".join(circle))
    sys.exit(0)


def test_only_the_warehouse_imports_its_schema():
    """warehouse.py alone opens DuckDB and owns the schema: its DDL lives in a sibling module
    (pipeline.warehouse_schema) that no other module imports."""
    importers = {name for name, imported in import_graph().items() if "pipeline.warehouse_schema" in imported}
    assert importers == {"pipeline.warehouse"}
