"""No import circle anywhere in `gpuaware`: between two modules of one package or across packages.

A circle means neither module can be read (or imported, or tested) without the other; it usually
marks a piece of one that belongs in a third module both can import. grimp (import-linter's engine)
builds the import graph of every module; imports under `if TYPE_CHECKING:` are left out, since they
never run. Every circle is listed, as its strongly connected set of modules, with one chain through it.
"""

from collections.abc import Iterable

import grimp


def import_circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Each set of modules that import one another, directly or through each other (Tarjan's strongly
    connected components of more than one module, or a module importing itself), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(root: str) -> None:
        # iterative depth-first search: the graph is deep enough to exhaust Python's recursion limit
        work: list[tuple[str, Iterable[str]]] = []

        def enter(module: str) -> None:
            index[module] = low[module] = len(index)
            stack.append(module)
            on_stack.add(module)
            work.append((module, iter(sorted(graph.find_modules_directly_imported_by(module)))))

        enter(root)
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in index:
                    enter(target)
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == module:
                            break
                    if len(members) > 1 or graph.direct_import_exists(importer=module, imported=module):
                        circles.append(sorted(members))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(circles)


def _describe(graph: grimp.ImportGraph, circle: list[str]) -> str:
    first, second = circle[0], circle[1 % len(circle)]
    there = graph.find_shortest_chain(importer=first, imported=second) or (first, second)
    back = graph.find_shortest_chain(importer=second, imported=first) or (second, first)
    return f"{len(circle)} modules: {', '.join(circle)}\n    {' -> '.join([*there, *back[1:]])}"


def test_no_import_circle_in_the_tree() -> None:
    graph = grimp.build_graph("gpuaware", exclude_type_checking_imports=True, cache_dir=None)
    circles = import_circles(graph)
    assert not circles, "import circles:\n" + "\n".join(_describe(graph, c) for c in circles)


def test_a_circle_through_three_modules_is_found() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("pkg.a", "pkg.b"), ("pkg.b", "pkg.c"), ("pkg.c", "pkg.a"), ("pkg.c", "pkg.d"),
                               ("pkg.e", "pkg.e")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_circles(graph) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.e"]]


def test_a_chain_without_a_way_back_is_no_circle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("pkg.a", "pkg.b"), ("pkg.b", "pkg.c"), ("pkg.a", "pkg.c")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_circles(graph) == []
