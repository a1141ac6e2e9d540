"""The modules read top-down: no rentopt module imports, however indirectly, one that imports it.

Every import counts, the ones deferred into a function body (taken to keep start-up fast) and
the ones under `if TYPE_CHECKING:` too: a deferred import still makes the two modules one layer,
and a circle of them is how a rule ends up with two homes. The graph is read from the source
with `ast` (not by importing), so a circle shows here even where import order happens to work.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

# The import packages and the folders they install from (pyproject.toml's package-dir).
PACKAGES = {"rentopt": ROOT / "rentopt", "rentopt.optimizer": ROOT / "optimizer", "rentopt.providers": ROOT / "providers"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The rentopt modules `name` imports anywhere in its source."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            wanted.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return {w for w in wanted if w in known and w != name}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each as one circle through
    its members found by a walk inside the group, so the message names the imports to cut."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_circle(graph, group) for group in groups]


def _one_circle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest circle from the group's first member back to it (breadth first)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for here in frontier:
            for w in sorted(graph[here] & group):
                if w == start:
                    path = [here]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came_from:
                    came_from[w] = here
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{sorted(group)} is not a circle")


def test_no_rentopt_module_imports_itself_through_others():
    found = circles(import_graph())
    assert not found, "import circles (cut one import of each, so the layers read top-down):\n" + \
        "\n".join(" -> ".join(m.rpartition(".")[2] for m in c) for c in found)


def test_the_circle_finder_finds_circles_it_is_shown():
    # the test above can fail: the two circles this repository used to have, rebuilt by hand
    graph = {"catalog": {"bundled", "store"}, "bundled": {"catalog"}, "currency": {"store"},
             "store": {"offers_io"}, "offers_io": {"sanity"}, "sanity": {"currency"}, "cli": {"catalog"}}
    assert sorted(sorted(c[:-1]) for c in circles(graph)) == \
        [["bundled", "catalog"], ["currency", "offers_io", "sanity", "store"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_deferred_and_relative_imports(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from . import y\nif False:\n    from .z import thing\n"
                    "def f():\n    from rentopt.optimizer.w import v\n    import rentopt.optimizer.u\n")
    known = {"rentopt.optimizer.x", "rentopt.optimizer.y", "rentopt.optimizer.z", "rentopt.optimizer.w",
             "rentopt.optimizer.u"}
    assert imports_of("rentopt.optimizer.x", path, known) == known - {"rentopt.optimizer.x"}
