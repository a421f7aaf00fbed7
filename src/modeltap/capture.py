"""Reading a capture back: typed records and events, grouped by session.

``Capture.load(DIR)`` reads ``audit.jsonl``, ``events.jsonl`` and, when it
exists, ``sessions.jsonl`` from one output directory and gives:

* ``records``, ``events``, ``session_ends``: every line, typed. Records and
  events are the dataclasses of :mod:`modeltap.records` (the one place that
  knows the schema); this module only decodes them.
* ``sessions``: a dict by ``session_id``, ordered by each session's earliest
  timestamp (file order breaks ties). A :class:`Session` holds its
  :class:`Turn` objects (one audited request = one model turn, in file order)
  and what belongs to no turn: refusals (a refused request has no audit
  record), unaudited pass-throughs, errors without a ``seq``.
* ``load_errors``: every line that could not be read, naming file and line
  number. A torn last line (the writer was killed mid-append) is reported
  here; loading never crashes on file content and never drops a line silently.

Decoding is tolerant in the directions a mixed fleet needs: keys a newer
writer added are ignored, a nullable field an older writer did not write
reads as ``None`` (unknown), and an event ``kind`` this reader does not know
is kept as a plain :class:`modeltap.records.Event`. A line whose known fields
have the wrong type is a load error, so nothing downstream sums a string.

Helpers follow "unknown is not zero":

* ``tool_was_called(name)``, ``tool_call_count(name)``, ``tool_calls_for(name)``
  look at the tool calls of the recorded responses. ``name`` matches a call
  whose bare ``name`` is equal, or whose qualified name ``namespace.name``
  is equal: ``"read"`` matches ``read`` in any namespace, ``"fs.read"`` only
  ``read`` in namespace ``fs`` (or a call literally named ``fs.read``).
* ``tools_advertised()``: union of the advertised ``tool_names`` in first-seen
  order (records with ``tool_names: null`` add nothing: they are unknown).
* ``usage``: a :class:`modeltap.records.Usage` summed element-wise over the
  turns. A total is ``None`` when any turn's count is ``None`` (or there is no
  turn at all); a known zero stays zero.
* ``coverage``: the six-channel evidence coverage (see below).
* ``evidence_complete`` / ``capture_errors`` (see below).

Evidence coverage
-----------------
Coverage is computed by :mod:`modeltap.coverage`, the one definition of
complete evidence that the proxy's ``sessions.jsonl`` lines use too: each
session's lines are fed, in turn order, to one
:class:`~modeltap.coverage.SessionEvidence`. What only a reader can see is
added here, in the ``data`` channel: a line of the files that could not be
read (every session is lowered: the lost line may have been its own), lines
that do not link up (an event's ``seq`` with no audit record, two responses
for one request), and a ``sessions.jsonl`` line counting other numbers of
audited or refused requests than the files hold (the last line of each run
counts; a WebSocket conversation that reconnects gets a line per socket
close, each counting the whole session so far). Reasons of an incomplete
``sessions.jsonl`` line that the files do not show lower ``events`` as "the
proxy reported: ...".

``evidence_complete`` is true exactly when the ``events``, ``actions``,
``status`` and ``data`` channels are complete. ``usage`` is left out on
purpose (a provider that reports no usage has not hidden what happened: that
shows as ``None`` totals and in coverage) and so is ``messages`` (never
recorded). ``capture_errors`` lists the reasons of those four channels, turn
reasons prefixed ``[turn i]`` (and ``[session ID]`` on a :class:`Capture`),
so ``evidence_complete`` is equivalent to ``capture_errors == []``.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import orjson

from modeltap.coverage import (
    CHANNELS,
    COMPLETE,
    EVIDENCE_CHANNELS,
    MESSAGES_NOT_RECORDED,
    NO_REQUESTS,
    NO_RESPONSE,
    USAGE_FIELDS,
    ChannelCoverage,
    CoverageStatus,
    EvidenceCoverage,
    SessionEvidence,
    merge,
    qualified_tool_name,
    session_capture_errors,
    worst_of_turns,
)
from modeltap.records import (
    AuditRecord,
    ErrorEvent,
    Event,
    FileReopenedEvent,
    RejectedEvent,
    ResponseEvent,
    SessionStatus,
    ToolCall,
    UnauditedEvent,
    Usage,
    WsCloseEvent,
    WsControlEvent,
    WsOpenEvent,
)
from modeltap.sink import TORN_MARK

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

# Coverage lives in modeltap.coverage; readers have always found it here too.
__all__ = [
    "CHANNELS",
    "EVIDENCE_CHANNELS",
    "MESSAGES_NOT_RECORDED",
    "NO_REQUESTS",
    "NO_RESPONSE",
    "USAGE_FIELDS",
    "Capture",
    "ChannelCoverage",
    "CoverageStatus",
    "EvidenceCoverage",
    "LoadError",
    "Session",
    "SessionEnd",
    "ToolInvocation",
    "Turn",
    "decode_event",
    "decode_record",
    "decode_session_end",
    "qualified_tool_name",
    "sum_usage",
    "tool_call_matches",
]


# --------------------------------------------------------------------------
# Line decoding


class _DecodeError(ValueError):
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
        raise _DecodeError(f"{where}: expected null")
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise _DecodeError(f"{where}: must not be null")
        last: _DecodeError | None = None
        for arm in args:
            if arm is type(None):
                continue
            try:
                return _decode(arm, value, where)
            except _DecodeError as exc:
                last = exc
        assert last is not None
        raise last
    if origin is tuple:
        if not isinstance(value, list):
            raise _DecodeError(f"{where}: expected a list")
        (item_hint, _ellipsis) = typing.get_args(hint)
        return tuple(_decode(item_hint, item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _DecodeError(f"{where}: expected an object")
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _DecodeError(f"{where}: expected an object")
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
        raise _DecodeError(f"{where}: expected {hint.__name__}")
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
            raise _DecodeError(f"{name}: missing")
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
        raise _DecodeError("not a JSON object")
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
        raise _DecodeError("not a JSON object")
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise _DecodeError("kind: missing or not a string")
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
        raise _DecodeError("not a JSON object")
    return _build(SessionEnd, data)


def _read_lines[T](
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
            except _DecodeError as exc:
                errors.append(LoadError(path.name, number, str(exc)))


# --------------------------------------------------------------------------
# Turns and sessions


def tool_call_matches(call: ToolCall, name: str) -> bool:
    """Whether ``name`` designates ``call``: its bare name or ``namespace.name``."""
    return call.name is not None and name in (call.name, qualified_tool_name(call))


def _parse_ts(ts: str | None) -> datetime | None:
    if ts is None:
        return None
    try:
        return datetime.fromisoformat(ts)
    except ValueError:
        return None


def _ms_between(start: str | None, end: str | None) -> float | None:
    a, b = _parse_ts(start), _parse_ts(end)
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return None
    return round((b - a).total_seconds() * 1000, 3)


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """Sum usage element-wise; a count is ``None`` if any part is ``None`` or there is none.

    Args:
        usages: per-turn usage.

    Returns:
        The totals. A known zero stays zero; unknown is never read as zero.
    """
    parts = list(usages)
    if not parts:
        return Usage()
    totals: dict[str, int | None] = {}
    for name in USAGE_FIELDS:
        values = [getattr(u, name) for u in parts]
        totals[name] = None if any(v is None for v in values) else sum(values)
    return Usage(**totals)


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """A tool call the model asked for, paired with the request that answered it.

    The result is looked for in the ``tool_results`` of the later requests of
    the same session (the first that carries the call's ``call_id``).
    """

    call: ToolCall
    turn_index: int
    result_turn_index: int | None
    result_bytes: int | None
    #: From the ``ts`` of the response event that asked for the call (written
    #: when the response ended) to the ``ts`` of the request that carried the
    #: result; ``None`` when either is unknown.
    duration_ms: float | None

    @property
    def name(self) -> str | None:
        """The call's qualified name (``namespace.name`` when namespaced)."""
        return qualified_tool_name(self.call)

    @property
    def answered(self) -> bool:
        """Whether a later request carried this call's result."""
        return self.result_turn_index is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One audited request and what was observed for it."""

    index: int
    record: AuditRecord
    #: The ``response`` event of this request, or ``None`` if none was recorded.
    response: ResponseEvent | None
    #: ``error`` events that name this request's ``seq``.
    error_events: tuple[ErrorEvent, ...] = ()
    #: Every event that names this request's ``seq``, in file order.
    events: tuple[Event, ...] = ()
    tool_invocations: tuple[ToolInvocation, ...] = ()
    coverage: EvidenceCoverage = COMPLETE

    @property
    def model(self) -> str:
        """The model the request asked for."""
        return self.record.model

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of the response (empty when there is no response)."""
        return self.response.tool_calls if self.response is not None else ()

    @property
    def usage(self) -> Usage:
        """The response's usage; all ``None`` when there is no response."""
        return self.response.usage if self.response is not None else Usage()

    @property
    def execution_time_ms(self) -> float | None:
        """The response's ``duration_ms``, or ``None`` if unknown."""
        return self.response.duration_ms if self.response is not None else None

    @property
    def errors(self) -> list[str]:
        """What went wrong in this exchange, unprefixed.

        Error events, the response's ``capture_errors``, an HTTP error status,
        and a missing response.
        """
        out = [f"{e.error}: {e.message}" for e in self.error_events]
        if self.response is None:
            out.append(NO_RESPONSE)
        else:
            if self.response.status is not None and self.response.status >= 400:
                out.append(f"upstream answered HTTP {self.response.status}")
            out.extend(self.response.capture_errors)
        return out

    @property
    def evidence_complete(self) -> bool:
        """See the module docstring: events, actions, status, data complete."""
        return self.coverage.evidence_complete

    @property
    def capture_errors(self) -> list[str]:
        """Reasons the turn's evidence is incomplete (unprefixed, deduplicated)."""
        return self.coverage.capture_errors


class _ToolHelpers:
    """Tool and usage helpers shared by :class:`Session` and :class:`Capture`."""

    __slots__ = ()

    def _turns(self) -> Iterable[Turn]:
        raise NotImplementedError

    def _advertised_lists(self) -> Iterable[tuple[str, ...] | None]:
        return (turn.record.tool_names for turn in self._turns())

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call of every recorded response, in order."""
        return [call for turn in self._turns() for call in turn.tool_calls]

    def tool_calls_for(self, name: str) -> list[ToolCall]:
        """Return the tool calls matching ``name`` (bare name or ``namespace.name``).

        Args:
            name: ``"read"`` matches ``read`` in any namespace; ``"fs.read"``
                matches ``read`` in namespace ``fs`` (or a call named ``fs.read``).

        Returns:
            The matching calls in order.
        """
        return [call for call in self.tool_calls if tool_call_matches(call, name)]

    def tool_call_count(self, name: str) -> int:
        """Return how many calls match ``name`` (see :meth:`tool_calls_for`)."""
        return len(self.tool_calls_for(name))

    def tool_was_called(self, name: str) -> bool:
        """Return whether any call matches ``name`` (see :meth:`tool_calls_for`).

        ``False`` is only a proof of absence when ``evidence_complete`` is true.
        """
        return any(tool_call_matches(call, name) for call in self.tool_calls)

    def tools_advertised(self) -> list[str]:
        """Return the union of advertised tool names, in first-seen order."""
        seen: dict[str, None] = {}
        for names in self._advertised_lists():
            for name in names or ():
                seen.setdefault(name, None)
        return list(seen)

    @property
    def usage(self) -> Usage:
        """Usage summed over the turns (see :func:`sum_usage`: unknown stays unknown)."""
        return sum_usage(turn.usage for turn in self._turns())


@dataclass(frozen=True, slots=True, kw_only=True)
class Session(_ToolHelpers):
    """Everything captured for one session id."""

    session_id: str
    run_ids: tuple[str, ...]
    turns: tuple[Turn, ...]
    #: Requests refused before forwarding (they have no audit record).
    refusals: tuple[RejectedEvent, ...] = ()
    unaudited: tuple[UnauditedEvent, ...] = ()
    #: ``error`` events that belong to no audited request.
    errors: tuple[ErrorEvent, ...] = ()
    #: Every event of the session, in file order.
    events: tuple[Event, ...] = ()
    #: Events whose ``seq`` names no audit record (e.g. the record's line was torn).
    orphan_events: tuple[Event, ...] = ()
    #: The session's ``sessions.jsonl`` lines (one per run that ended it).
    ends: tuple[SessionEnd, ...] = ()
    #: What lowers the session's coverage outside any turn.
    own_coverage: EvidenceCoverage = COMPLETE

    def _turns(self) -> Iterable[Turn]:
        return self.turns

    @property
    def tool_invocations(self) -> list[ToolInvocation]:
        """Every tool call with its result pairing, flattened in turn order."""
        return [inv for turn in self.turns for inv in turn.tool_invocations]

    @property
    def stop_reason(self) -> str | None:
        """The last ``stop_reason`` in ``sessions.jsonl``, or ``None`` if none was written."""
        return self.ends[-1].stop_reason if self.ends else None

    @property
    def execution_time_ms(self) -> float | None:
        """Sum of the turns' response durations; ``None`` if any is unknown or no turn."""
        times = [turn.execution_time_ms for turn in self.turns]
        if not times or any(t is None for t in times):
            return None
        return round(sum(t for t in times if t is not None), 3)

    @property
    def error_messages(self) -> list[str]:
        """Turn errors prefixed ``[turn i]``, then refusals and errors outside turns."""
        out = [f"[turn {turn.index}] {msg}" for turn in self.turns for msg in turn.errors]
        out.extend(f"refused ({e.rule}): {e.message}" for e in self.refusals)
        out.extend(f"{e.error}: {e.message}" for e in self.errors)
        return out

    @property
    def coverage(self) -> EvidenceCoverage:
        """The worst over the turns, lowered by what happened outside them."""
        return merge(worst_of_turns((t.index, t.coverage) for t in self.turns), self.own_coverage)

    @property
    def evidence_complete(self) -> bool:
        """Whether ``events``, ``actions``, ``status`` and ``data`` are complete.

        Equivalent to ``capture_errors == []``; see the module docstring.
        """
        return self.coverage.evidence_complete

    @property
    def capture_errors(self) -> list[str]:
        """Why the evidence is incomplete: turn reasons as ``[turn i] ...``, then the session's."""
        return session_capture_errors(
            ((t.index, t.coverage) for t in self.turns), self.own_coverage
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Capture(_ToolHelpers):
    """The contents of one modeltap output directory. Build it with :meth:`load`."""

    directory: Path
    records: tuple[AuditRecord, ...]
    events: tuple[Event, ...]
    session_ends: tuple[SessionEnd, ...]
    sessions: dict[str, Session]
    load_errors: tuple[LoadError, ...] = ()

    def _turns(self) -> Iterable[Turn]:
        return (turn for session in self.sessions.values() for turn in session.turns)

    @property
    def run_ids(self) -> list[str]:
        """Every run id seen, in first-seen order."""
        seen: dict[str, None] = {}
        for session in self.sessions.values():
            for run_id in session.run_ids:
                seen.setdefault(run_id, None)
        return list(seen)

    @property
    def coverage(self) -> EvidenceCoverage:
        """The worst over the sessions; every reason prefixed ``[session ID]``."""
        if not self.sessions:
            coverage = EvidenceCoverage()
            for name in ("events", "actions", "usage", "status"):
                coverage = coverage.lower(name, "unavailable", NO_REQUESTS)
            for error in self.load_errors:
                coverage = coverage.lower("data", "partial", f"unreadable line: {error}")
            return coverage
        merged = EvidenceCoverage()
        data_reasons = set(_data_reasons(self.load_errors))
        for session in self.sessions.values():
            session_coverage = session.coverage
            for name in CHANNELS:
                if name == "messages":
                    continue
                channel = session_coverage.channel(name)
                for reason in channel.reasons:
                    # Load errors lower every session alike: say them once.
                    text = (
                        reason
                        if reason in data_reasons
                        else f"[session {session.session_id}] {reason}"
                    )
                    merged = merged.lower(name, channel.status, text)
        return merged

    @property
    def evidence_complete(self) -> bool:
        """Whether every session's evidence is complete (and there is a session)."""
        return self.coverage.evidence_complete

    @property
    def capture_errors(self) -> list[str]:
        """Every session's capture errors, prefixed ``[session ID]``; load errors once."""
        if not self.sessions:
            return [NO_REQUESTS, *_data_reasons(self.load_errors)]
        data_reasons = _data_reasons(self.load_errors)
        out: list[str] = list(data_reasons)
        for session in self.sessions.values():
            for error in session.capture_errors:
                if error not in data_reasons:
                    out.append(f"[session {session.session_id}] {error}")
        return out

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Capture:
        """Read a capture directory.

        Args:
            directory: a directory holding any of ``audit.jsonl``,
                ``events.jsonl`` and ``sessions.jsonl`` (only the last: the
                agent bypassed the proxy, and the sessions say so).

        Returns:
            The capture. Unreadable lines are listed in ``load_errors``.

        Raises:
            NotADirectoryError: ``directory`` is not a directory.
            FileNotFoundError: it holds none of the three files.
            OSError: a file could not be read.
        """
        root = Path(directory)
        if not root.is_dir():
            raise NotADirectoryError(f"not a directory: {root}")
        if not any((root / name).exists() for name in (AUDIT_FILE, EVENTS_FILE, SESSIONS_FILE)):
            raise FileNotFoundError(f"no {AUDIT_FILE}, {EVENTS_FILE} or {SESSIONS_FILE} in {root}")
        errors: list[LoadError] = []
        records = [r for _, r in _read_lines(root / AUDIT_FILE, decode_record, errors)]
        events = [e for _, e in _read_lines(root / EVENTS_FILE, decode_event, errors)]
        ends = [s for _, s in _read_lines(root / SESSIONS_FILE, decode_session_end, errors)]
        sessions = _group(records, events, ends, tuple(errors))
        return cls(
            directory=root,
            records=tuple(records),
            events=tuple(events),
            session_ends=tuple(ends),
            sessions=sessions,
            load_errors=tuple(errors),
        )


def _data_reasons(load_errors: Iterable[LoadError]) -> list[str]:
    return [f"unreadable line: {error}" for error in load_errors]


# --------------------------------------------------------------------------
# Grouping


@dataclass(slots=True)
class _SessionParts:
    """Mutable accumulator used while grouping; frozen into a Session at the end."""

    first_seen: tuple[datetime | None, int]
    run_ids: dict[str, None] = field(default_factory=dict)
    records: list[AuditRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    ends: list[SessionEnd] = field(default_factory=list)


def _sort_key(first_seen: tuple[datetime | None, int]) -> tuple[int, float, int]:
    ts, position = first_seen
    # Unparsable timestamps sort after parsable ones, in file order.
    return (0, ts.timestamp(), position) if ts is not None else (1, 0.0, position)


def _group(
    records: list[AuditRecord],
    events: list[Event],
    ends: list[SessionEnd],
    load_errors: tuple[LoadError, ...],
) -> dict[str, Session]:
    parts: dict[str, _SessionParts] = {}
    position = 0

    def part(session_id: str, run_id: str, ts: str) -> _SessionParts:
        nonlocal position
        position += 1
        parsed = _parse_ts(ts)
        if parsed is not None and parsed.tzinfo is None:
            parsed = None  # naive and aware datetimes cannot be ordered together
        entry = parts.setdefault(session_id, _SessionParts((parsed, position)))
        if parsed is not None and (entry.first_seen[0] is None or parsed < entry.first_seen[0]):
            entry.first_seen = (parsed, entry.first_seen[1])
        entry.run_ids.setdefault(run_id, None)
        return entry

    for record in records:
        part(record.session_id, record.run_id, record.ts).records.append(record)
    for event in events:
        part(event.session_id, event.run_id, event.ts).events.append(event)
    for end in ends:
        part(end.session_id, end.run_id, end.ts).ends.append(end)

    # An event links to its record by (run_id, seq), wherever the record is.
    record_keys = {(r.run_id, r.seq) for r in records}
    linked: dict[tuple[str, int], list[Event]] = {}
    for event in events:
        if event.seq is not None and (event.run_id, event.seq) in record_keys:
            linked.setdefault((event.run_id, event.seq), []).append(event)

    ordered = sorted(parts.items(), key=lambda item: _sort_key(item[1].first_seen))
    return {
        session_id: _build_session(session_id, entry, linked, record_keys, load_errors)
        for session_id, entry in ordered
    }


def _build_session(
    session_id: str,
    entry: _SessionParts,
    linked: dict[tuple[str, int], list[Event]],
    record_keys: set[tuple[str, int]],
    load_errors: tuple[LoadError, ...],
) -> Session:
    evidence = SessionEvidence(keep_answers=True)
    for reason in _data_reasons(load_errors):
        evidence.lower("data", "partial", reason)

    # Turns in file order: each record, then its response and errors, so that a
    # tool call is answered by a later request (the order the proxy saw them in).
    turns: list[Turn] = []
    seen_keys: set[tuple[str, int]] = set()
    for record in entry.records:
        key = (record.run_id, record.seq)
        if key in seen_keys:
            # Events cannot tell two records with one seq apart: keep the first.
            evidence.lower(
                "data", "partial", f"audit record seq {record.seq} appears more than once"
            )
            continue
        seen_keys.add(key)
        index = evidence.request(record)
        turn_events = tuple(linked.get(key, ()))
        responses = [e for e in turn_events if isinstance(e, ResponseEvent)]
        if len(responses) > 1:
            evidence.lower_turn(
                index,
                "data",
                "partial",
                f"{len(responses)} response events for this request; the first is used",
            )
        if responses:
            evidence.response(index, responses[0])
        errors = tuple(e for e in turn_events if isinstance(e, ErrorEvent))
        for error in errors:
            evidence.turn_error(index, error)
        turns.append(
            Turn(
                index=index,
                record=record,
                response=responses[0] if responses else None,
                error_events=errors,
                events=turn_events,
            )
        )

    refusals = tuple(e for e in entry.events if isinstance(e, RejectedEvent))
    unaudited = tuple(e for e in entry.events if isinstance(e, UnauditedEvent))
    loose_errors: list[ErrorEvent] = []
    orphans: list[Event] = []
    for event in entry.events:
        if event.seq is not None and (event.run_id, event.seq) not in record_keys:
            orphans.append(event)
            evidence.lower(
                "data",
                "partial",
                f"{event.kind} event names seq {event.seq}, which has no audit record",
            )
        if isinstance(event, ErrorEvent) and (
            event.seq is None or (event.run_id, event.seq) not in record_keys
        ):
            loose_errors.append(event)
    for refusal in refusals:
        evidence.refused(refusal)
    for error in loose_errors:
        evidence.error(error)

    # The proxy's own counts catch lines that never reached the files. A run can
    # write several lines for one session (a WebSocket conversation that
    # reconnects); each counts everything so far, so the last one is checked.
    last_of_run: dict[str, SessionEnd] = {}
    for end in entry.ends:
        last_of_run[end.run_id] = end
    for end in last_of_run.values():
        audited = sum(1 for t in turns if t.record.run_id == end.run_id)
        if end.requests_audited is not None and end.requests_audited != audited:
            evidence.lower(
                "data",
                "partial",
                f"{SESSIONS_FILE} says run {end.run_id} audited {end.requests_audited} "
                f"requests; {AUDIT_FILE} holds {audited}",
            )
        # Refused after the session ended: by definition not in its line.
        refused = sum(
            1 for r in refusals if r.run_id == end.run_id and r.rule != SESSION_ENDED_RULE
        )
        if end.refusals is not None and end.refusals != refused:
            evidence.lower(
                "data",
                "partial",
                f"{SESSIONS_FILE} says run {end.run_id} refused {end.refusals} "
                f"requests; {EVENTS_FILE} holds {refused}",
            )
        evidence.reported(end)

    result = evidence.result()
    turns = [
        dataclasses.replace(
            turn,
            tool_invocations=_invocations(turn, turns, evidence),
            coverage=result.turns.get(turn.index, EvidenceCoverage()),
        )
        for turn in turns
    ]
    return Session(
        session_id=session_id,
        run_ids=tuple(entry.run_ids),
        turns=tuple(turns),
        refusals=refusals,
        unaudited=unaudited,
        errors=tuple(loose_errors),
        events=tuple(entry.events),
        orphan_events=tuple(orphans),
        ends=tuple(entry.ends),
        own_coverage=result.own,
    )


def _invocations(
    turn: Turn, turns: list[Turn], evidence: SessionEvidence
) -> tuple[ToolInvocation, ...]:
    """The turn's tool calls, each with the request that answered it (the fold's pairing)."""
    out: list[ToolInvocation] = []
    for position, call in enumerate(turn.tool_calls):
        answer = evidence.answers.get((turn.index, position))
        answered_by = turns[answer.turn] if answer is not None else None
        out.append(
            ToolInvocation(
                call=call,
                turn_index=turn.index,
                result_turn_index=answer.turn if answer is not None else None,
                result_bytes=answer.result_bytes if answer is not None else None,
                duration_ms=(
                    _ms_between(turn.response.ts, answered_by.record.ts)
                    if answered_by is not None and turn.response is not None
                    else None
                ),
            )
        )
    return tuple(out)
