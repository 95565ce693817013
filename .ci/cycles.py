"""No import cycle among a package's modules, type-only imports included (`make lint`).

`python .ci/cycles.py streamlet [...]` builds each package's import graph with grimp (import-linter's
graph library; TYPE_CHECKING and function-level imports count), lists every cycle it finds with the
lines that import, and every module the graph misses (a folder of modules without __init__.py);
exit status 1 if there is one. docs/development.md says how to break a cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path


def strongly_connected(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import cycles of a graph (module -> the modules it imports): each strongly connected
    component of more than one module, or of one that imports itself, sorted; the components
    in the order of their first module. Tarjan's algorithm, without recursion."""
    nodes = sorted(set(edges) | {w for targets in edges.values() for w in targets})
    succ = {v: sorted(set(edges.get(v, ()))) for v in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, i = work.pop()
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or v in succ[v]:
                    found.append(sorted(component))
    return sorted(found)


def one_cycle(edges: Mapping[str, Iterable[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component:
    the modules in import order, the first one again at the end."""
    inside = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(set(edges.get(v, ()))):
                if w == start:
                    path = [start]
                    while v != start:
                        path.append(v)
                        v = came_from[v]
                    return [start, *reversed(path[1:]), start]
                if w in inside and w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise ValueError(f"no cycle through {start}")


def unseen(modules: set[str], package: str, directory: Path) -> list[str]:
    """The modules under ``directory`` (the package ``package``) that the graph does not have:
    those of a folder without __init__.py, which the import graph (and a wheel) leave out."""
    missing = []
    for path in sorted(directory.rglob("*.py")):
        parts = path.relative_to(directory).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join((package, *parts))
        if name not in modules:
            missing.append(name)
    return missing


def main(packages: list[str]) -> int:
    import importlib

    import grimp

    bad = 0
    for package in packages:
        graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
        edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
        for component in strongly_connected(edges):
            bad += 1
            cycle = one_cycle(edges, component)
            print(f"import cycle among {len(component)} modules: {', '.join(component)}")
            for a, b in zip(cycle, cycle[1:], strict=False):
                details = graph.get_import_details(importer=a, imported=b)
                where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
                print(f"    {a} -> {b}  ({where})")
        root = importlib.import_module(package).__file__
        assert root is not None
        for name in unseen(set(graph.modules), package, Path(root).parent):
            bad += 1
            print(f"{name}: not in the import graph (its folder needs an __init__.py)")
    if bad:
        print(f"{bad} problem(s): docs/development.md, \"Import cycles\", says how to mend each")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["streamlet"]))
