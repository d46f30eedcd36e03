"""The import graph (grimp, import-linter's graph library): no module import cycle anywhere in
the project's packages, imports inside functions included, and every module in one of the
layers of ``.importlinter``, so that the layers contract (``lint-imports``, run by .ci/run)
judges every module, including the next one added."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crawlplatform", "tasks", "web")


def _modules_and_imports() -> dict[str, set[str]]:
    """Each module of the project (migrations aside) and the project modules it imports. A
    package importing its own submodules, or a submodule its package, is not an edge: that
    is how packages are built, not a dependency between rooms."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = {m for m in graph.modules if ".migrations" not in m}
    return {
        m: {
            t
            for t in graph.find_modules_directly_imported_by(m)
            if t in modules and not (t.startswith(m + ".") or m.startswith(t + "."))
        }
        for m in modules
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _layers() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [m.strip() for line in lines for m in re.split(r"[:|]", line) if m.strip()]


def test_the_cycle_finder_finds_a_cycle_through_several_modules():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_module_import_cycle_anywhere():
    assert cycles(_modules_and_imports()) == []


def test_every_module_sits_in_a_layer():
    layers = _layers()
    graph = _modules_and_imports()
    outside = [
        m
        for m, imported in graph.items()
        if not any(m == layer or m.startswith(layer + ".") for layer in layers)
        # a package whose __init__ imports nothing but its own modules needs no layer
        and not (imported == set() and any(o.startswith(m + ".") for o in graph))
        and m not in PACKAGES
    ]
    assert outside == [], f"add these to a layer in .importlinter: {outside}"
