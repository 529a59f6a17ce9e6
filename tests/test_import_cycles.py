"""No import circle among the project's packages. A circle hides a module's
real dependencies and pushes imports into function bodies to get past load
order; the way out is to move the import to the caller or pass a factory.
An import made only under ``TYPE_CHECKING`` never runs, but a circle through
one is refused too (the last test)."""

from __future__ import annotations

import grimp

PACKAGES = ("orchestrator", "sandbox", "store", "policies", "cli")


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Each set of modules that import one another (directly or through
    others), as a chain from one of them back to itself."""
    found: list[list[str]] = []
    seen: set[str] = set()
    for module in sorted(graph.modules):
        if module in seen:
            continue
        # Modules this one imports (transitively) that also import it.
        members = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if not members:
            continue
        seen |= members | {module}
        first = min(members)
        there = graph.find_shortest_chain(importer=module, imported=first)
        back = graph.find_shortest_chain(importer=first, imported=module)
        assert there is not None and back is not None
        found.append([*there, *back[1:]])
    return found


def test_the_packages_import_one_another_without_a_circle():
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert circles(graph) == []


def test_a_circle_is_found():
    """The check itself: a circle added to the real graph is reported."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    graph.add_import(importer="store.chain", imported="store.write.recorder")
    (circle,) = circles(graph)
    assert circle[0] == circle[-1] and {"store.chain", "store.write.recorder"} <= set(circle)


def test_no_circle_even_through_imports_made_for_the_type_checker():
    """A type-only circle (the recorder naming the Store that imports it)
    still ties the modules together for a reader and for mypy: the recorder
    names what it needs of a store as a Protocol instead."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False, cache_dir=None)
    assert circles(graph) == []
