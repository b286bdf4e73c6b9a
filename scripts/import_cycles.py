"""Fail when any two loadkit modules import each other, directly or through others.

import-linter's `acyclic_siblings` contract (`.importlinter`) checks packages
against their siblings; this checks single modules, lazy imports included,
which is what "no import cycle in loadkit/" means. Run by `make lint`.
"""

from __future__ import annotations

import sys

import grimp


def module_cycles(package: str) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    graph = grimp.build_graph(package)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def main() -> int:
    cycles = module_cycles("loadkit")
    for group in cycles:
        print("import cycle: " + " <-> ".join(group))
    if cycles:
        print(f"{len(cycles)} import cycle(s) in loadkit/: break them (docs/architecture.md)")
        return 1
    print("no import cycles in loadkit/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
