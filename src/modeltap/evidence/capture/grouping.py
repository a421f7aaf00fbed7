"""Grouping a capture's lines into sessions and turns, and the evidence only a reader sees.

Coverage is computed by :mod:`modeltap.evidence.coverage`, the one definition of
complete evidence that the proxy's ``sessions.jsonl`` lines use too: each
session's lines are fed, in turn order, to one
:class:`~modeltap.evidence.coverage.SessionEvidence` (``file_reopened`` events with
``lost_lines`` too, as the proxy fed them). What only a reader can see is
added here, in the ``data`` channel: a line of the files that could not be
read (every session is lowered: the lost line may have been its own), lines
that do not link up (an event's ``seq`` with no audit record, two responses
for one request), and a ``sessions.jsonl`` line counting other numbers of
audited or refused requests than the files hold (the last line of each run
counts; a WebSocket conversation that reconnects gets a line per socket
close, each counting the whole session so far). Reasons of an incomplete
``sessions.jsonl`` line that the files do not show lower ``events`` as "the
proxy reported: ...".

MCP lines (SPEC 3b) join their session: its MCP audit lines and ``mcp_*``
events are kept in lists of their own on the :class:`Session`, and fed to
the fold after the turns (its ``tools/call`` lines, then its ``mcp_result``
events), which pairs each execution with the model call it ran
(:mod:`modeltap.evidence.mcp_pairing`'s rule: either side may come first, so
the order the proxy saw them in gives the same pairs);
:mod:`modeltap.evidence.capture.executions` builds the
:class:`~modeltap.evidence.capture.executions.McpExecution` of each, and
each :class:`ToolInvocation` holds the one that ran it. An ``mcp_*``
event's ``seq`` links to an MCP audit line as a response's does to a model
record; an ``error`` event of an MCP exchange belongs to no turn.

Requests passed through unaudited (``GET .../models``, a ``HEAD /``
preflight) are not model traffic: lines that are nothing else — no audit
record, no refusal, no error, no ``sessions.jsonl`` line — make no session
(so no "audit unsupported" session out of an SDK listing models); they are
kept apart as the capture's ``pass_through``. Each session's turns are placed
among the attempts of their calls (:mod:`modeltap.evidence.capture.retries`).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from modeltap.evidence.capture.executions import McpExecution, executions_of
from modeltap.evidence.capture.lines import (
    AUDIT_FILE,
    EVENTS_FILE,
    SESSION_ENDED_RULE,
    SESSIONS_FILE,
    LoadError,
    SessionEnd,
)
from modeltap.evidence.capture.retries import find_retries
from modeltap.evidence.capture.turns import Session, ToolInvocation, Turn, ms_between, parse_ts
from modeltap.evidence.coverage import EvidenceCoverage, SessionEvidence
from modeltap.evidence.recorded_output import not_in_recording, recorded_output
from modeltap.evidence.recordings import Recording, find_exchange
from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Event,
    FileReopenedEvent,
    McpAuditRecord,
    McpResultEvent,
    RejectedEvent,
    ResponseEvent,
    UnauditedEvent,
)

__all__ = ["data_reasons", "group", "with_output"]

#: The ``kind`` of every MCP event starts so (``mcp_result``, ``mcp_request``, ...).
MCP_EVENT_PREFIX = "mcp_"


def data_reasons(load_errors: Iterable[LoadError]) -> list[str]:
    """The ``data`` coverage reasons the unreadable lines give (every session gets them)."""
    return [f"unreadable line: {error}" for error in load_errors]


@dataclass(slots=True)
class _SessionParts:
    """Mutable accumulator used while grouping; frozen into a Session at the end."""

    first_seen: tuple[datetime | None, int]
    run_ids: dict[str, None] = field(default_factory=dict)
    records: list[AuditRecord] = field(default_factory=list)
    mcp_records: list[McpAuditRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    ends: list[SessionEnd] = field(default_factory=list)


def _sort_key(first_seen: tuple[datetime | None, int]) -> tuple[int, float, int]:
    ts, position = first_seen
    # Unparsable timestamps sort after parsable ones, in file order.
    return (0, ts.timestamp(), position) if ts is not None else (1, 0.0, position)


def group(
    records: list[AuditRecord],
    events: list[Event],
    ends: list[SessionEnd],
    load_errors: tuple[LoadError, ...],
    mcp_records: list[McpAuditRecord] | None = None,
) -> tuple[dict[str, Session], tuple[UnauditedEvent, ...]]:
    """Group a capture's lines by session.

    Args:
        records: every model audit record, in file order.
        mcp_records: every MCP audit line, in file order.
        events: every event, in file order.
        ends: every ``sessions.jsonl`` line.
        load_errors: the lines that could not be read (they lower every session).

    Returns:
        The sessions by id, ordered by first appearance, and the unaudited
        pass-through events of ids that saw nothing else (no session).
    """
    parts: dict[str, _SessionParts] = {}
    position = 0

    def part(session_id: str, run_id: str, ts: str) -> _SessionParts:
        nonlocal position
        position += 1
        parsed = parse_ts(ts)
        if parsed is not None and parsed.tzinfo is None:
            parsed = None  # naive and aware datetimes cannot be ordered together
        entry = parts.setdefault(session_id, _SessionParts((parsed, position)))
        if parsed is not None and (entry.first_seen[0] is None or parsed < entry.first_seen[0]):
            entry.first_seen = (parsed, entry.first_seen[1])
        entry.run_ids.setdefault(run_id, None)
        return entry

    for record in records:
        part(record.session_id, record.run_id, record.ts).records.append(record)
    for mcp_record in mcp_records or ():
        part(mcp_record.session_id, mcp_record.run_id, mcp_record.ts).mcp_records.append(mcp_record)
    for event in events:
        part(event.session_id, event.run_id, event.ts).events.append(event)
    for end in ends:
        part(end.session_id, end.run_id, end.ts).ends.append(end)

    # An event links to its record by (run_id, seq), wherever the record is.
    record_keys = {(r.run_id, r.seq) for r in records}
    mcp_keys = {(r.run_id, r.seq) for r in mcp_records or ()}
    linked: dict[tuple[str, int], list[Event]] = {}
    for event in events:
        if event.seq is not None and (event.run_id, event.seq) in record_keys:
            linked.setdefault((event.run_id, event.seq), []).append(event)

    ordered = sorted(parts.items(), key=lambda item: _sort_key(item[1].first_seen))
    sessions: dict[str, Session] = {}
    pass_through: list[UnauditedEvent] = []
    for session_id, entry in ordered:
        if _pass_through_only(entry):
            pass_through.extend(e for e in entry.events if isinstance(e, UnauditedEvent))
            continue
        sessions[session_id] = _build_session(
            session_id, entry, linked, record_keys, mcp_keys, load_errors
        )
    return sessions, tuple(pass_through)


def _pass_through_only(entry: _SessionParts) -> bool:
    """Only unaudited pass-throughs: not model traffic, so not a session."""
    return (
        not entry.records
        and not entry.mcp_records
        and not entry.ends
        and bool(entry.events)
        and all(isinstance(e, UnauditedEvent) for e in entry.events)
    )


def _build_session(
    session_id: str,
    entry: _SessionParts,
    linked: dict[tuple[str, int], list[Event]],
    record_keys: set[tuple[str, int]],
    mcp_keys: set[tuple[str, int]],
    load_errors: tuple[LoadError, ...],
) -> Session:
    evidence = SessionEvidence(keep_answers=True)
    for reason in data_reasons(load_errors):
        evidence.lower("data", "partial", reason)

    # Turns in file order: each record, then its response and errors, so that a
    # tool call is answered by a later request (the order the proxy saw them in).
    turns: list[Turn] = []
    seen_keys: set[tuple[str, int]] = set()
    mcp_lines = deque(_mcp_feed(entry))
    runs = {run_id: position for position, run_id in enumerate(entry.run_ids)}
    for record in entry.records:
        # The MCP lines the proxy wrote before this request, as it fed them.
        while mcp_lines and _before(mcp_lines[0][0], record, runs):
            _feed_mcp(evidence, mcp_lines.popleft())
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
        linked_to = (event.run_id, event.seq) if event.seq is not None else None
        if linked_to is not None and linked_to not in record_keys and linked_to not in mcp_keys:
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
    for event in entry.events:
        if isinstance(event, FileReopenedEvent) and event.lost_lines:
            evidence.file_reopened(event.file)
    for error in loose_errors:
        evidence.error(error)
    for line in mcp_lines:
        _feed_mcp(evidence, line)
    executions = executions_of(entry.mcp_records, entry.events, evidence.executed_by)
    by_seq = {execution.seq: execution for execution in executions}

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
    attempts = find_retries(turns)
    turns = [
        dataclasses.replace(
            turn,
            tool_invocations=_invocations(turn, turns, evidence, by_seq),
            coverage=result.turns.get(turn.index, EvidenceCoverage()),
            retry_of=attempts[turn.index].retry_of,
            attempt=attempts[turn.index].attempt,
            first_attempt=attempts[turn.index].first_attempt,
        )
        for turn in turns
    ]
    carried: dict[int, list[ToolInvocation]] = {}
    for turn in turns:
        for inv in turn.tool_invocations:
            if inv.result_turn_index is not None:
                carried.setdefault(inv.result_turn_index, []).append(inv)
    turns = [
        dataclasses.replace(turn, results_of=tuple(carried[turn.index]))
        if turn.index in carried
        else turn
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
        mcp_records=tuple(entry.mcp_records),
        mcp_events=tuple(e for e in entry.events if e.kind.startswith(MCP_EVENT_PREFIX)),
        mcp_executions=executions,
    )


def _mcp_feed(entry: _SessionParts) -> list[tuple[McpAuditRecord, list[McpResultEvent]]]:
    """The session's MCP audit lines in file order, each with its answers
    (an answer arrives before the agent can act on it, so right after its line)."""
    answers: dict[tuple[str, int], list[McpResultEvent]] = {}
    for event in entry.events:
        if isinstance(event, McpResultEvent) and event.seq is not None:
            answers.setdefault((event.run_id, event.seq), []).append(event)
    return [(r, answers.get((r.run_id, r.seq), [])) for r in entry.mcp_records]


def _before(line: McpAuditRecord, record: AuditRecord, runs: dict[str, int]) -> bool:
    """Whether the proxy wrote MCP ``line`` before model ``record`` (``seq``
    orders a run's lines; runs in the order the session first saw them)."""
    if line.run_id == record.run_id:
        return line.seq < record.seq
    return runs.get(line.run_id, 0) < runs.get(record.run_id, 0)


def _feed_mcp(evidence: SessionEvidence, line: tuple[McpAuditRecord, list[McpResultEvent]]) -> None:
    record, answers = line
    evidence.mcp_call(record)
    for answer in answers:
        evidence.mcp_result(answer)


def _invocations(
    turn: Turn,
    turns: list[Turn],
    evidence: SessionEvidence,
    executions: dict[int, McpExecution],
) -> tuple[ToolInvocation, ...]:
    """The turn's tool calls, each with the request that answered it and the
    MCP execution that ran it (the fold's pairings)."""
    out: list[ToolInvocation] = []
    for position, call in enumerate(turn.tool_calls):
        answer = evidence.answers.get((turn.index, position))
        executed = evidence.executed_by.get((turn.index, position))
        answered_by = turns[answer.turn] if answer is not None else None
        out.append(
            ToolInvocation(
                call=call,
                turn_index=turn.index,
                result_turn_index=answer.turn if answer is not None else None,
                result_bytes=answer.result_bytes if answer is not None else None,
                duration_ms=(
                    ms_between(turn.response.ts, answered_by.record.ts)
                    if answered_by is not None and turn.response is not None
                    else None
                ),
                result_is_error=(
                    _error_flag(answered_by, call.call_id) if answered_by is not None else None
                ),
                execution=executions.get(executed) if executed is not None else None,
            )
        )
    return tuple(out)


def _error_flag(answered_by: Turn, call_id: str | None) -> bool | None:
    """The error flag of the result that answered call ``call_id`` (None: no id, no flag)."""
    for result in answered_by.record.tool_results:
        if call_id is not None and result.call_id == call_id:
            return result.is_error
    return None


def with_output(session: Session, recording: Recording) -> Session:
    """``session`` with each turn's output text read from ``recording``.

    A turn's exchange is found by its session, ``seq`` (HTTP) or position
    among its run's turns (WebSocket), and turn key
    (:func:`~modeltap.evidence.recordings.find_exchange`); its ``messages``
    channel then says how much of the text was seen
    (:mod:`modeltap.evidence.recorded_output`).
    """
    turns: list[Turn] = []
    position: dict[str, int] = {}
    for turn in session.turns:
        run = turn.record.run_id
        position[run] = position.get(run, 0) + 1
        entry = find_exchange(recording, session.session_id, turn.record, position[run])
        read = (
            recorded_output(recording, entry, turn.record)
            if entry is not None
            else not_in_recording(recording.root)
        )
        coverage = dataclasses.replace(turn.coverage, messages=read.messages)
        turns.append(dataclasses.replace(turn, output_text=read.text, coverage=coverage))
    return dataclasses.replace(session, turns=tuple(turns))
