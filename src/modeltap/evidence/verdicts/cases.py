"""Cases in a TOML file, judged on a capture (``modeltap check DIR --expect CASES.toml``).

A case file is for CI in any language: each ``[[case]]`` names what one
session (or the whole capture) must show, in the spirit of ``seeds/003``'s
eval cases::

    [[case]]
    name = "refund happy path"
    session = "refund-1"              # optional: else the whole capture
    expect_tools = ["lookup", "refund"]  # in this order, gaps allowed
    forbid_tools = ["delete_account"]
    max_tool_calls = 4
    expect_text = "refunded"          # the final text (needs --record)
    optional = ["expect_text"]        # keys whose unavailability does not fail

    [[case.tool_called]]
    name = "refund"
    args = { amount = { approx = 500 }, order = { regex = "^o-" } }

Each key is judged only when the case gives it (there are no defaults):
``expect_tools`` (:meth:`~Expect.tools_in_order`), ``forbid_tools`` (one
:meth:`~Expect.tool_not_called` per tool), ``only_tools``,
``max_tool_calls``, ``expect_text`` (:meth:`~Expect.final_text_contains`),
``expect_no_error = true`` (:meth:`~Expect.no_tool_errors`), ``max_tokens``
(total tokens), ``max_cost_usd``, ``models`` (:meth:`~Expect.only_models`),
``completed = true``, and ``[[case.tool_called]]`` tables (``name``,
``args``). In ``args``, a one-key table named after a matcher is that
matcher (``{ approx = 1.5 }``, ``{ fuzzy = "181001" }``, ``{ regex = "^o-" }``,
``{ contains = ... }``, ``{ one_of = [...] }``, ``{ anything = true }``);
``{ equals = ... }`` matches a literal table that happens to look like one (a
matcher table inside it is still a matcher: escape it with ``equals`` too);
``{ approx = 1.5, rel = 0.01, abs = 0.0 }`` is approx with its tolerances, as a
verdict's JSON writes it.

A file that cannot be read raises :class:`CaseFileError`, naming the line
(and the key, when one is at fault): ``modeltap check`` exits 2 with it.
"""

from __future__ import annotations

import datetime
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from modeltap.evidence.coverage import CHANNELS, EvidenceCoverage
from modeltap.evidence.verdicts.assertions import Expect
from modeltap.evidence.verdicts.match import (
    Matcher,
    anything,
    approx,
    contains,
    equals,
    fuzzy,
    one_of,
    regex,
    require_json,
)
from modeltap.evidence.verdicts.scope import Scope
from modeltap.evidence.verdicts.verdict import Verdict, Verdicts, verdicts

__all__ = [
    "CASE_KEYS",
    "Case",
    "CaseFileError",
    "Judged",
    "judge_cases",
    "load_cases",
    "parse_cases",
]

#: What a case may say, and what each key asks (the ``optional`` list names these).
CASE_KEYS: Final = (
    "name",
    "session",
    "expect_tools",
    "forbid_tools",
    "only_tools",
    "max_tool_calls",
    "expect_text",
    "expect_no_error",
    "max_tokens",
    "max_cost_usd",
    "models",
    "completed",
    "optional",
    "tool_called",
)
#: Keys that describe the case rather than ask something of it.
_NOT_JUDGED: Final = ("name", "session", "optional")


class CaseFileError(ValueError):
    """A case file that cannot be read: its ``line`` and ``key`` say where."""

    def __init__(self, source: str, line: int | None, message: str, key: str | None = None):
        self.source, self.line, self.key = source, line, key
        where = f"{source} line {line}" if line is not None else source
        said = f"key {key!r}: {message}" if key is not None else message
        super().__init__(f"{where}: {said}")


#: One check of a case: the key that asked it, and how it is judged.
Check = Callable[[Expect], Verdict]


@dataclass(frozen=True, slots=True)
class Case:
    """One ``[[case]]`` of a case file."""

    name: str
    line: int | None
    session: str | None
    #: ``(key, check)`` in the order the case file gives them.
    checks: tuple[tuple[str, Check], ...]
    optional: frozenset[str]

    def judge(self, expect: Expect, *, excused: bool = True) -> Verdicts:
        """Every check of the case on ``expect``'s scope, rolled up under the case's name.

        Args:
            expect: the scope's assertions.
            excused: mark the verdicts of the ``optional`` keys optional
                (not for a session the capture does not hold: ``optional``
                excuses a channel the capture could not fill, not a name
                that matches nothing).
        """
        made = []
        for key, check in self.checks:
            verdict = check(expect)
            made.append(verdict.optional() if excused and key in self.optional else verdict)
        return verdicts(*made, name=self.name)


@dataclass(frozen=True, slots=True)
class Judged:
    """A case and its verdicts."""

    case: Case
    scope: str
    verdicts: Verdicts


# --------------------------------------------------------------------------
# Reading


class _Lines:
    """Where the headers and keys of a case file are (tomllib gives no positions)."""

    _CASE: Final = re.compile(r"^\s*\[\[\s*case\s*\]\]")
    _TOOL: Final = re.compile(r"^\s*\[\[\s*case\s*\.\s*tool_called\s*\]\]")
    _HEADER: Final = re.compile(r"^\s*\[")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.cases = [i + 1 for i, line in enumerate(self.lines) if self._CASE.match(line)]
        self.tools = [i + 1 for i, line in enumerate(self.lines) if self._TOOL.match(line)]

    def case(self, index: int) -> int | None:
        return self.cases[index] if index < len(self.cases) else None

    def _end(self, start: int) -> int:
        nxt = [n for n in self.cases if n > start]
        return nxt[0] if nxt else len(self.lines) + 1

    def tool(self, case: int, index: int) -> int | None:
        start = self.case(case)
        if start is None:
            return None
        inside = [n for n in self.tools if start < n < self._end(start)]
        return inside[index] if index < len(inside) else start

    def key(self, start: int | None, key: str) -> int | None:
        """The line of ``key = ...`` in the table that starts at line ``start``."""
        if start is None:
            return None
        pattern = re.compile(
            rf"^\s*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*="
        )
        for number in range(start + 1, len(self.lines) + 1):
            line = self.lines[number - 1]
            if self._HEADER.match(line):
                break
            if pattern.match(line):
                return number
        return start


def load_cases(path: str | Path) -> list[Case]:
    """Read a case file.

    Raises:
        CaseFileError: it cannot be read, is not TOML, or a case is malformed.
    """
    source = Path(path)
    try:
        # utf-8-sig: a byte order mark (Windows editors write one) is not TOML.
        text = source.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise CaseFileError(str(source), None, f"cannot be read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise CaseFileError(str(source), None, "is not UTF-8 text") from None
    return parse_cases(text, str(source))


def parse_cases(text: str, source: str = "CASES.toml") -> list[Case]:
    """Read the cases of a case file's text.

    Args:
        text: the TOML.
        source: how errors name the file.

    Returns:
        The cases, in file order.

    Raises:
        CaseFileError: the text is not TOML, or a case is malformed (the
            error names the line and the key).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        found = re.search(r"line (\d+)", str(e))
        raise CaseFileError(
            source, int(found.group(1)) if found else None, f"not valid TOML ({e})"
        ) from None
    lines = _Lines(text)
    for key in data:
        if key != "case":
            raise CaseFileError(
                source, lines.key(0, key), "unknown top-level key (cases are [[case]] tables)", key
            )
    raw = data.get("case")
    if not isinstance(raw, list) or not raw:
        raise CaseFileError(source, None, "no [[case]] table: nothing to judge")
    cases: list[Case] = []
    names: set[str] = set()
    for index, table in enumerate(raw):
        if not isinstance(table, dict):
            raise CaseFileError(source, lines.case(index), "a case is a table")
        case = _case(table, index, lines, source)
        if case.name in names:
            raise CaseFileError(
                source, lines.key(lines.case(index), "name"), "a second case with this name", "name"
            )
        names.add(case.name)
        cases.append(case)
    return cases


def _case(table: Mapping[str, Any], index: int, lines: _Lines, source: str) -> Case:
    start = lines.case(index)

    def fail(key: str, message: str) -> CaseFileError:
        return CaseFileError(source, lines.key(start, key), message, key)

    for key in table:
        if key not in CASE_KEYS:
            return_error = fail(key, f"unknown key (a case may give {', '.join(CASE_KEYS)})")
            raise return_error
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CaseFileError(source, start, "every case needs a name (a non-empty string)", "name")
    session = table.get("session")
    if session is not None and not isinstance(session, str):
        raise fail("session", "must be a string (a session id)")
    checks: list[tuple[str, Check]] = []
    for key, value in table.items():
        if key in _NOT_JUDGED:
            continue
        if key == "tool_called":
            checks.extend(_tool_checks(value, index, lines, source))
        else:
            check = _check(key, value, fail)
            if check is not None:
                checks.extend((key, c) for c in check)
    optional = table.get("optional", [])
    if not isinstance(optional, list) or not all(isinstance(k, str) for k in optional):
        raise fail("optional", "must be a list of key names")
    for key in optional:
        if key not in table or key in _NOT_JUDGED:
            raise fail("optional", f"names {key!r}, which this case does not judge")
    if not checks:
        raise CaseFileError(source, start, f"case {name!r} asks nothing (give a key to judge)")
    return Case(name, start, session, tuple(checks), frozenset(optional))


def _strings(
    value: Any, key: str, fail: Callable[[str, str], CaseFileError], *, empty: bool
) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(key, "must be a list of tool or model names (strings)")
    if not value and not empty:
        raise fail(key, "must not be empty")
    return list(value)


def _count(value: Any, key: str, fail: Callable[[str, str], CaseFileError]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(key, "must be a whole number, 0 or more")
    return value


def _not_called(name: str) -> Check:
    return lambda e: e.tool_not_called(name)


def _check(key: str, value: Any, fail: Callable[[str, str], CaseFileError]) -> list[Check] | None:
    """The checks one key asks for (``None`` for ``expect_no_error = false`` and the like)."""
    if key == "expect_tools":
        names = _strings(value, key, fail, empty=False)
        return [lambda e: e.tools_in_order(names)]
    if key == "forbid_tools":
        forbidden = _strings(value, key, fail, empty=False)
        return [_not_called(n) for n in forbidden]
    if key == "only_tools":
        allowed = _strings(value, key, fail, empty=True)
        return [lambda e: e.only_tools(allowed)]
    if key == "models":
        models = _strings(value, key, fail, empty=False)
        return [lambda e: e.only_models(models)]
    if key == "max_tool_calls":
        most = _count(value, key, fail)
        return [lambda e: e.max_tool_calls(most)]
    if key == "max_tokens":
        tokens = _count(value, key, fail)
        return [lambda e: e.max_tokens(tokens)]
    if key == "max_cost_usd":
        # TOML has nan and inf: a bound of nan would pass any cost.
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise fail(key, "must be a number of US dollars, 0 or more")
        usd = float(value)
        return [lambda e: e.max_cost(usd)]
    if key == "expect_text":
        if not isinstance(value, str) or not value:
            raise fail(key, "must be a non-empty string")
        text = value
        return [lambda e: e.final_text_contains(text)]
    if key in ("expect_no_error", "completed"):
        if not isinstance(value, bool):
            raise fail(key, "must be true or false")
        if not value:
            return None
        if key == "completed":
            return [lambda e: e.completed()]
        return [lambda e: e.no_tool_errors()]
    raise AssertionError(key)  # pragma: no cover - CASE_KEYS is checked first


def _tool_checks(value: Any, case: int, lines: _Lines, source: str) -> list[tuple[str, Check]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        start = lines.case(case)
        raise CaseFileError(
            source,
            lines.key(start, "tool_called"),
            "write [[case.tool_called]] tables",
            "tool_called",
        )
    checks: list[tuple[str, Check]] = []
    for index, table in enumerate(value):
        start = lines.tool(case, index)

        def fail(key: str, message: str, start: int | None = start) -> CaseFileError:
            return CaseFileError(source, lines.key(start, key), message, f"tool_called.{key}")

        for key in table:
            if key not in ("name", "args"):
                raise fail(key, "unknown key (a tool_called table gives name and args)")
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise fail("name", "needs a name (the tool)")
        args = table.get("args", {})
        if not isinstance(args, dict):
            raise fail("args", "must be a table of argument name = value or matcher")
        expected = {k: _expectation(v, f"args.{k}", fail) for k, v in args.items()}
        checks.append(("tool_called", _called(name, expected)))
    return checks


def _called(name: str, args: dict[str, Any]) -> Check:
    return lambda e: e.tool_called(name, **args)


def _expectation(value: Any, where: str, fail: Callable[[str, str], CaseFileError]) -> Any:
    """A TOML value as a plain value, its one-key matcher tables made matchers."""
    if isinstance(value, datetime.date | datetime.time):
        raise fail("args", f"{where}: a date or time is not a JSON value")
    if isinstance(value, dict):
        if len(value) == 1:
            ((name, inner),) = value.items()
            made = _matcher(name, inner, where, fail)
            if made is not None:
                return made
        if "approx" in value and set(value) <= _APPROX_KEYS:
            # The table a verdict's JSON writes for approx with its tolerances.
            return _approx(value, where, fail)
        return {k: _expectation(v, f"{where}.{k}", fail) for k, v in value.items()}
    if isinstance(value, list):
        return [_expectation(v, f"{where}[{i}]", fail) for i, v in enumerate(value)]
    try:
        return require_json(value)
    except ValueError as e:
        raise fail("args", f"{where}: {e}") from None


#: ``{ approx = 1.5, rel = 0.01, abs = 0.0 }``: approx and its tolerances.
_APPROX_KEYS: Final = frozenset({"approx", "rel", "abs"})


def _approx(
    table: Mapping[str, Any], where: str, fail: Callable[[str, str], CaseFileError]
) -> Matcher:
    values = [table["approx"], table.get("rel", 1e-6), table.get("abs", 0.0)]
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        raise fail("args", f"{where}: approx, rel and abs are numbers")
    try:
        return approx(values[0], rel=values[1], abs=values[2])
    except ValueError as e:
        raise fail("args", f"{where}: {e}") from None


def _matcher(
    name: str, inner: Any, where: str, fail: Callable[[str, str], CaseFileError]
) -> Matcher | None:
    try:
        if name == "equals":
            # equals escapes this one table, as equals() does in Python: what it
            # holds follows the usual rules (a matcher table inside is a matcher;
            # escape it with equals too), so a verdict's JSON reads back the same.
            if isinstance(inner, dict):
                return equals({k: _expectation(v, f"{where}.{k}", fail) for k, v in inner.items()})
            if isinstance(inner, list):
                return equals([_expectation(v, f"{where}[{i}]", fail) for i, v in enumerate(inner)])
            return equals(_expectation(inner, where, fail))
        if name == "approx":
            return _approx({"approx": inner}, where, fail)
        if name == "fuzzy":
            return fuzzy(inner)
        if name == "regex":
            return regex(inner)
        if name == "contains":
            return contains(_expectation(inner, where, fail))
        if name == "one_of":
            if not isinstance(inner, list):
                raise ValueError("one_of takes a list")
            return one_of(*(_expectation(v, where, fail) for v in inner))
        if name == "anything":
            if inner is not True:
                raise ValueError("write { anything = true }")
            return anything()
    except CaseFileError:
        raise
    except ValueError as e:
        raise fail("args", f"{where}: {e}") from None
    return None


# --------------------------------------------------------------------------
# Judging


def _no_such_session(session_id: str, known: Sequence[str]) -> Scope:
    shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
    reason = f"no such session {session_id!r} in this out dir" + (
        f" (sessions: {shown})" if known else " (it holds no session)"
    )
    coverage = EvidenceCoverage()
    for channel in CHANNELS:
        coverage = coverage.lower(channel, "unavailable", reason)
    return Scope(
        label=f"session {session_id}", turns=(), sessions=(), coverage=coverage, target=None
    )


def judge_cases(
    cases: Sequence[Case], whole: Expect, sessions: Mapping[str, Expect]
) -> list[Judged]:
    """Judge each case on its session, or on the whole capture.

    Args:
        cases: from :func:`parse_cases`.
        whole: ``capture.expect``.
        sessions: each session's ``expect``, by session id.

    Returns:
        Each case with its verdicts, in order. A case naming a session the
        capture does not hold is judged on nothing: every verdict
        unavailable, its ``optional`` keys too.
    """
    out = []
    for case in cases:
        missing = case.session is not None and case.session not in sessions
        if case.session is None:
            expect = whole
        elif not missing:
            expect = sessions[case.session]
        else:
            expect = Expect(_no_such_session(case.session, list(sessions)))
        out.append(Judged(case, expect.scope.label, case.judge(expect, excused=not missing)))
    return out
