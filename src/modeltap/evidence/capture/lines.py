"""Reading the evidence files back: each JSONL line decoded into the records.py type it is.

``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl`` lines become the
dataclasses of :mod:`modeltap.evidence.records` (the one place that knows the
schema); msgspec converts each parsed line into its type, checking the type of
every field it knows (orjson parses the line, as it writes it: msgspec here
only checks and builds the types). Decoding is tolerant in the directions a
mixed fleet needs: keys a newer writer added are ignored, a field an older
writer did not write reads as its default (``None`` for a nullable one:
unknown; records.py gives every field added later a default), values the
schema's promises do not list (a newer api, a longer id) are kept, and an
event ``kind`` this reader does not know is kept as a plain
:class:`modeltap.evidence.records.Event`. A line whose known fields have the
wrong type is a load error, so nothing downstream sums a string (and a JSON
integer read into a ``float`` field is a float). :func:`read_lines` never
crashes on file content and never drops a line silently: every unreadable line
(a torn last line included) becomes a :class:`LoadError` naming file and line
number.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import orjson

from modeltap.evidence.records import (
    AUDIT_FILE,
    EVENT_TYPES,
    EVENTS_FILE,
    MCP_API,
    SESSIONS_FILE,
    AuditRecord,
    Event,
    McpAuditRecord,
    SessionStatus,
    kind_of,
)
from modeltap.evidence.sink import TORN_MARK

__all__ = [
    "AUDIT_FILE",
    "EVENTS_FILE",
    "EVENT_KINDS",
    "SESSIONS_FILE",
    "SESSION_ENDED_RULE",
    "DecodeError",
    "LoadError",
    "SessionEnd",
    "decode_audit_line",
    "decode_event",
    "decode_record",
    "decode_session_end",
    "read_lines",
]

#: The refusal of a request that arrived after its session ended.
SESSION_ENDED_RULE: Final = "session_ended"

EVENT_KINDS: Final[dict[str, type[Event]]] = {kind_of(cls): cls for cls in EVENT_TYPES}


class DecodeError(ValueError):
    """A line is JSON but not the record it claims to be."""


#: One line of ``sessions.jsonl`` (the writer's own type, from records.py).
SessionEnd = SessionStatus


@dataclass(frozen=True, slots=True)
class LoadError:
    """A line of a capture file that could not be read."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file} line {self.line}: {self.message}"


def _convert[T](data: Any, cls: type[T]) -> T:
    """msgspec's conversion, its complaint worded as the rest of the load errors.

    Raises:
        DecodeError: ``data`` is not a ``cls``.
    """
    if not isinstance(data, dict):
        raise DecodeError("not a JSON object")
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise DecodeError(_worded(str(exc))) from None


_AT: Final = re.compile(r"^(?P<what>.*?)(?: - at `\$\.?(?P<where>[^`]*)`)?$", re.DOTALL)
_MISSING: Final = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_EXPECTED: Final = re.compile(r"^Expected `(?P<wanted>[^`]*)`, got `(?P<got>[^`]*)`$")
#: msgspec's names of JSON types, as a load error says them.
_TYPE_WORDS: Final = {"array": "a list", "object": "an object"}


def _worded(message: str) -> str:
    """``seq: expected int``, ``usage.input_tokens: missing``, ``model: must not be null``."""
    at = _AT.match(message)
    assert at is not None  # the pattern matches any text
    what, where = at["what"], at["where"] or ""
    if missing := _MISSING.match(what):
        where = f"{where}.{missing['name']}" if where else missing["name"]
        what = "missing"
    elif expected := _EXPECTED.match(what):
        wanted = [t for t in expected["wanted"].split(" | ") if t != "null"]
        if expected["got"] == "null":
            what = "must not be null"
        else:
            what = "expected " + " or ".join(_TYPE_WORDS.get(t, t) for t in wanted)
    return f"{where}: {what}" if where else what


def decode_record(data: Any) -> AuditRecord:
    """Build an :class:`AuditRecord` from one parsed ``audit.jsonl`` line.

    Args:
        data: the parsed JSON value.

    Returns:
        The record. Keys the record does not know are ignored.

    Raises:
        ValueError: the value is not an audit record (a field is missing or
            has the wrong type).
    """
    return _convert(data, AuditRecord)


def decode_audit_line(data: Any) -> AuditRecord | McpAuditRecord:
    """Build the record one parsed ``audit.jsonl`` line is: a model request's
    :class:`AuditRecord`, or an :class:`McpAuditRecord` (``api`` ``mcp``).

    Raises:
        ValueError: the value is not a record of its kind.
    """
    if isinstance(data, dict) and data.get("api") == MCP_API:
        return _convert(data, McpAuditRecord)
    return decode_record(data)


def decode_event(data: Any) -> Event:
    """Build the event dataclass named by ``kind`` from one ``events.jsonl`` line.

    Args:
        data: the parsed JSON value.

    Returns:
        The typed event; an unknown ``kind`` gives a plain :class:`Event`.

    Raises:
        ValueError: the value is not an event of its kind.
    """
    if not isinstance(data, dict):
        raise DecodeError("not a JSON object")
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise DecodeError("kind: missing or not a string")
    # A newer writer's kind: keep what every event has, so it is not lost.
    return _convert(data, EVENT_KINDS.get(kind, Event))


def decode_session_end(data: Any) -> SessionEnd:
    """Build a :class:`SessionEnd` from one ``sessions.jsonl`` line.

    Args:
        data: the parsed JSON value.

    Returns:
        The session end.

    Raises:
        ValueError: the value is not a session line.
    """
    return _convert(data, SessionEnd)


def read_lines[T](
    path: Path, decode: Callable[[Any], T], errors: list[LoadError]
) -> Iterator[tuple[int, T]]:
    """Yield ``(line number, decoded line)``; unreadable lines go to ``errors``."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        number = 0
        for raw in lines:
            number += 1
            if not raw.strip():
                continue  # a blank line carries nothing
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                if raw.endswith(TORN_MARK):
                    message = "torn write: a line cut short (disk full?), closed by the next writer"
                elif raw.endswith(b"\n"):
                    message = "not valid JSON"
                else:
                    message = "incomplete last line (torn write: no newline at end of file)"
                errors.append(LoadError(path.name, number, message))
                continue
            try:
                yield number, decode(value)
            except DecodeError as exc:
                errors.append(LoadError(path.name, number, str(exc)))
