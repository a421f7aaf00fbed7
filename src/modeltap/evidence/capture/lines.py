"""Reading the evidence files back: each JSONL line decoded into the records.py type it is.

``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl`` lines become the
dataclasses of :mod:`modeltap.evidence.records` (the one place that knows the schema);
this module only decodes them. Decoding is tolerant in the directions a mixed
fleet needs: keys a newer writer added are ignored, a nullable field an older
writer did not write reads as ``None`` (unknown), and an event ``kind`` this
reader does not know is kept as a plain :class:`modeltap.evidence.records.Event`. A
line whose known fields have the wrong type is a load error, so nothing
downstream sums a string. :func:`read_lines` never crashes on file content
and never drops a line silently: every unreadable line (a torn last line
included) becomes a :class:`LoadError` naming file and line number.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Event,
    FileReopenedEvent,
    RejectedEvent,
    ResponseEvent,
    SessionStatus,
    UnauditedEvent,
    WsCloseEvent,
    WsControlEvent,
    WsOpenEvent,
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
    "decode_event",
    "decode_record",
    "decode_session_end",
    "read_lines",
]

AUDIT_FILE: Final = "audit.jsonl"
EVENTS_FILE: Final = "events.jsonl"
SESSIONS_FILE: Final = "sessions.jsonl"
#: The refusal of a request that arrived after its session ended.
SESSION_ENDED_RULE: Final = "session_ended"

EVENT_KINDS: Final[dict[str, type[Event]]] = {
    "rejected": RejectedEvent,
    "unaudited": UnauditedEvent,
    "response": ResponseEvent,
    "error": ErrorEvent,
    "ws_open": WsOpenEvent,
    "ws_close": WsCloseEvent,
    "ws_control": WsControlEvent,
    "file_reopened": FileReopenedEvent,
}


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


def _accepts_none(hint: Any) -> bool:
    return hint is type(None) or (
        typing.get_origin(hint) in (typing.Union, types.UnionType)
        and type(None) in typing.get_args(hint)
    )


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    # records.py uses postponed annotations; resolve them once per class.
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode(hint: Any, value: Any, where: str) -> Any:
    """Check ``value`` against a type hint of records.py and convert it.

    Only the shapes records.py uses are supported: scalars, ``X | None``,
    ``tuple[X, ...]``, ``dict[str, Any]`` and nested dataclasses.
    """
    if hint is Any:
        return value
    if hint is type(None):
        if value is None:
            return None
        raise DecodeError(f"{where}: expected null")
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise DecodeError(f"{where}: must not be null")
        last: DecodeError | None = None
        for arm in args:
            if arm is type(None):
                continue
            try:
                return _decode(arm, value, where)
            except DecodeError as exc:
                last = exc
        assert last is not None
        raise last
    if origin is tuple:
        if not isinstance(value, list):
            raise DecodeError(f"{where}: expected a list")
        (item_hint, _ellipsis) = typing.get_args(hint)
        return tuple(_decode(item_hint, item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise DecodeError(f"{where}: expected an object")
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise DecodeError(f"{where}: expected an object")
        return _build(hint, value, where)
    # bool is an int subclass in Python; JSON keeps them apart, so do we.
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    else:  # pragma: no cover - a records.py type this decoder was not taught
        raise TypeError(f"cannot decode type {hint!r}")
    if not ok:
        raise DecodeError(f"{where}: expected {hint.__name__}")
    return value


def _build[T](cls: type[T], data: dict[str, Any], where: str = "") -> T:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        name = f"{where}.{f.name}" if where else f.name
        if f.name in data:
            kwargs[f.name] = _decode(hints[f.name], data[f.name], name)
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        elif _accepts_none(hints[f.name]):
            # A nullable field an older writer did not write is unknown.
            kwargs[f.name] = None
        else:
            raise DecodeError(f"{name}: missing")
    return cls(**kwargs)


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
    if not isinstance(data, dict):
        raise DecodeError("not a JSON object")
    return _build(AuditRecord, data)


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
    cls = EVENT_KINDS.get(kind)
    if cls is None:
        # A newer writer's kind: keep what every event has, so it is not lost.
        return _build(Event, data)
    return _build(cls, data)


def decode_session_end(data: Any) -> SessionEnd:
    """Build a :class:`SessionEnd` from one ``sessions.jsonl`` line.

    Args:
        data: the parsed JSON value.

    Returns:
        The session end.

    Raises:
        ValueError: the value is not a session line.
    """
    if not isinstance(data, dict):
        raise DecodeError("not a JSON object")
    return _build(SessionEnd, data)


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
