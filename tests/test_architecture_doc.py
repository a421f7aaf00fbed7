"""docs/ARCHITECTURE.md keeps up with the package: one line for every module of
``src/modeltap`` (none missing, none that is gone) and the layers table as
``tests/test_import_graph.py`` enforces it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_graph import LAYERS, PACKAGE, modules

DOC = Path(__file__).resolve().parent.parent / "docs" / "ARCHITECTURE.md"


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section, up to the next ``## ``."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def module_of(path: str) -> str:
    """``core/exchange.py`` -> ``modeltap.core.exchange``; ``core/`` -> ``modeltap.core``."""
    parts = [p for p in path.removesuffix(".py").split("/") if p]
    if parts == ["__init__"]:
        parts = []
    return ".".join([PACKAGE, *parts])


def listed_modules(text: str) -> list[str]:
    """The modules the list names, one a line: ``- `path`: what it is``."""
    return [module_of(m) for m in re.findall(r"^- `([\w/.]+)`:", section(text, "Modules"), re.M)]


def layer_rows(text: str) -> dict[int, set[str]]:
    """The layers table: ``| rank | `path`, `path` | why |`` rows."""
    rows: dict[int, set[str]] = {}
    for rank, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", section(text, "The layers"), re.M):
        rows[int(rank)] = {module_of(path) for path in re.findall(r"`([\w/.]+)`", cell)}
    return rows


def test_the_readers_read_what_they_are_given() -> None:
    text = (
        "# Doc\n\n## The layers\n\n| 1 | `rules/` | x |\n"
        "| 0 | `evidence/records.py`, `__main__.py` | y |\n"
        "\n## Modules\n\n- `__init__.py`: root\n- `core/`: core\n- `core/run.py`: run\n"
        "- `not a module`\n\n## Where to add\n\n- `wire/sse.py`: elsewhere\n"
    )
    assert listed_modules(text) == ["modeltap", "modeltap.core", "modeltap.core.run"]
    assert layer_rows(text) == {
        1: {"modeltap.rules"},
        0: {"modeltap.evidence.records", "modeltap.__main__"},
    }


def test_every_module_has_its_line_and_every_line_a_module() -> None:
    listed = listed_modules(DOC.read_text())
    present = set(modules())
    missing = sorted(present - set(listed))
    gone = sorted(set(listed) - present)
    twice = sorted({m for m in listed if listed.count(m) > 1})
    assert (missing, gone, twice) == ([], [], []), (
        f"docs/ARCHITECTURE.md, ## Modules: no line for {missing}; "
        f"lines for modules that do not exist {gone}; listed more than once {twice}"
    )


def test_the_layers_table_is_the_import_graph_tests() -> None:
    enforced = {rank: set(prefixes) for rank, prefixes in enumerate(LAYERS)}
    assert layer_rows(DOC.read_text()) == enforced
