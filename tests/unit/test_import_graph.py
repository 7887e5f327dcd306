"""No import circle anywhere in the operator's package or the console's (issue 44): a module imports only modules
that do not import it back, directly or through others. Type-checking imports count: a circle kept out of run time
by `if TYPE_CHECKING:` is still two modules that cannot be read one without the other. The layers between and
inside packages are import-linter's contracts (pyproject.toml); this is the rest: no circle inside one layer."""

from __future__ import annotations

import grimp


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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
    return found


def test_no_import_circle_in_the_operator_or_the_console() -> None:
    graph = grimp.build_graph("heterojob", "heterojob_console", cache_dir=None)
    for package in ("heterojob", "heterojob_console"):  # a package's __init__ is not an import of its own modules
        assert package in graph.modules
    assert circles(graph) == []


def test_the_check_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_module("p.d")
    graph.add_import(importer="p.d", imported="p.a")
    assert circles(graph) == [["p.a", "p.b", "p.c"]]
