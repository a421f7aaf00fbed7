"""The shape of the package, read from its source: no import cycle anywhere, a
core that never reaches mitmproxy or OpenTelemetry, even through another
modeltap module, and packages that import only the layers below them.

Every ``import`` counts, at module level or inside a function (a lazy import
still ties two modules together: ``cli`` and ``replay`` once imported each
other that way). ruff's banned-api rule (TID251) checks each file's own
imports; this checks the graph.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "modeltap"

#: The glue: what may import mitmproxy (and what the core must not import).
GLUE_PREFIXES = (
    f"{PACKAGE}.addons",
    f"{PACKAGE}.app.cli",
    f"{PACKAGE}.app.proxy",
    f"{PACKAGE}.__main__",
)
#: Neither core nor mitmproxy glue: the pytest plugin (it starts a proxy, lazily),
#: and the module that re-exports its names where users import them.
PLUGIN = (f"{PACKAGE}.app.pytest_plugin", f"{PACKAGE}.pytest_plugin")
#: The only importers of OpenTelemetry.
TELEMETRY = f"{PACKAGE}.telemetry"

#: The layers, lowest first (docs/ARCHITECTURE.md draws them). A module imports
#: its own layer and the layers below it, never one above: the schema
#: knows nothing, the rules know the schema, the framings know the rules, each
#: wire API knows the framings, what is derived from the lines knows the wire
#: APIs, the exchange core knows all of those, and so on up to the glue.
LAYERS: tuple[tuple[str, ...], ...] = (
    (f"{PACKAGE}.evidence.records", f"{PACKAGE}.evidence.redaction"),
    (f"{PACKAGE}.rules",),
    (f"{PACKAGE}.wire",),
    (f"{PACKAGE}.apis",),
    (f"{PACKAGE}.evidence",),
    (f"{PACKAGE}.core",),
    (f"{PACKAGE}.replay",),
    (f"{PACKAGE}.report",),
    (f"{PACKAGE}.app",),
    (TELEMETRY,),
    (f"{PACKAGE}.addons",),
    (
        *PLUGIN,
        f"{PACKAGE}.app.cli",
        f"{PACKAGE}.app.proxy",
        f"{PACKAGE}.__main__",
        # Public names users import: modeltap.match re-exports the matchers.
        f"{PACKAGE}.match",
    ),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """Every module ``name`` imports (modeltap's by module; others by top-level name)."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m if m.startswith(PACKAGE) else m.split(".")[0] for m in found}


@functools.cache
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, found) for name, path in found.items()}


def find_cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle, as the list of modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in edges:
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def reach(edges: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through other modeltap modules."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), set()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def is_glue(name: str) -> bool:
    return name.startswith(GLUE_PREFIXES) or name in PLUGIN or name.startswith(TELEMETRY)


def layer_of(name: str) -> tuple[int, str]:
    """The layer of module ``name`` and the package it counts in: the longest
    prefix named in :data:`LAYERS` (``modeltap.app.cli`` is glue, the rest of
    ``modeltap.app`` is not)."""
    best: tuple[int, str] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (rank, prefix)
    assert best is not None, f"{name} is in no layer: add its package to LAYERS"
    return best


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "os"}, "b": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_relative_and_lazy_imports_are_read(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from . import sibling\nfrom .sub import thing\n"
        "def f():\n    import mitmproxy.http\n    from modeltap.x import y\n"
    )
    known = {"modeltap.pkg.sibling", "modeltap.pkg.sub", "modeltap.x.y"}
    assert imports_of("modeltap.pkg.m", source, known) == {
        "modeltap.pkg.sibling",
        "modeltap.pkg.sub",
        "mitmproxy",
        "modeltap.x.y",
    }


def test_no_import_cycle_anywhere() -> None:
    edges = graph()
    assert len(edges) > 40  # the whole package was read
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])


def test_the_core_never_reaches_mitmproxy_or_opentelemetry() -> None:
    edges = graph()
    core = [name for name in edges if not is_glue(name)]
    assert f"{PACKAGE}.core.exchange" in core and f"{PACKAGE}.core.run" in core
    for name in core:
        reached = reach(edges, name)
        assert not reached & {"mitmproxy", "opentelemetry"}, name
        assert not any(is_glue(m) for m in reached), (name, sorted(filter(is_glue, reached)))


@pytest.mark.parametrize("name", sorted(graph()))
def test_only_the_telemetry_package_imports_opentelemetry(name: str) -> None:
    direct = graph()[name]
    if not name.startswith(TELEMETRY):
        assert "opentelemetry" not in direct
    if name.startswith(TELEMETRY) or name in PLUGIN:
        assert "mitmproxy" not in direct


def test_the_layer_finder_knows_sub_packages() -> None:
    assert layer_of(f"{PACKAGE}.app.cli")[0] == len(LAYERS) - 1
    assert layer_of(f"{PACKAGE}.app.options") == (8, f"{PACKAGE}.app")
    assert layer_of(f"{PACKAGE}.evidence.records") == (0, f"{PACKAGE}.evidence.records")
    assert layer_of(f"{PACKAGE}.evidence.capture.lines") == (4, f"{PACKAGE}.evidence")


@pytest.mark.parametrize("name", sorted(n for n in graph() if n != PACKAGE))
def test_each_package_imports_only_the_layers_below(name: str) -> None:
    rank, package = layer_of(name)
    upward = []
    for target in sorted(graph()[name]):
        # The package root holds __version__ and lazy re-exports only.
        if not target.startswith(PACKAGE + ".") or target == PACKAGE:
            continue
        if layer_of(target)[0] > rank:
            upward.append(target)
    assert not upward, f"{name} ({package}) imports a layer above its own: {upward}"


def wire_packages() -> set[str]:
    """The wire packages of the registry (``modeltap.apis.openai_chat``, ...)."""
    from modeltap import apis

    return {str(getattr(api, "__name__", "")) for api in apis.APIS}


def test_there_are_wire_packages_to_find() -> None:
    found = wire_packages()
    assert len(found) >= 5 and f"{PACKAGE}.apis.gemini" in found
    assert all(name in graph() for name in found)


@pytest.mark.parametrize("name", sorted(n for n in graph() if not n.startswith(f"{PACKAGE}.apis")))
def test_nothing_outside_apis_imports_a_wire(name: str) -> None:
    """A wire is one package (apis/__init__.py): the rest of modeltap reaches it
    through the registry and the contract, never by its module."""
    wires = wire_packages()
    direct = {m for m in graph()[name] if any(m == w or m.startswith(w + ".") for w in wires)}
    assert not direct, f"{name} imports a wire package: {sorted(direct)}"


@pytest.mark.parametrize("name", sorted(n for n in graph() if not n.startswith(f"{PACKAGE}.apis")))
def test_nothing_outside_apis_spells_a_wire_name(name: str) -> None:
    """No code outside ``apis/`` asks for a wire by its record name
    (``"gemini.generate_content"``): what it needs of a wire is in the contract.
    Docstrings and comments may name them."""
    from modeltap import apis

    names = {api.NAME for api in apis.APIS}
    tree = ast.parse(modules()[name].read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    spelt = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
    ]
    assert not spelt, f"{name} names a wire: {spelt}"
