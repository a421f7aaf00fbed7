"""The page's data: a :class:`~modeltap.evidence.capture.Capture` as JSON-able dicts.

Everything the page shows comes from here, and everything here comes from
the public :class:`~modeltap.evidence.capture.Capture` API (sessions, turns, tool
invocations, coverage, usage, load errors): the page is the evidence, read by
the same code as ``modeltap report`` and ``modeltap check``, never by a parser
of its own.

Records and events are copied whole (``dataclasses.asdict``), so a field a
newer modeltap writes (a cost estimate, a provider) reaches the page without
this module knowing it. What the page needs beyond the files is derived here,
from those same objects, so it can be tested without a browser:

* :func:`turn_changes`: what changed in a turn's request from the previous
  turn of its session (tools added or removed, instructions hash, model,
  effort, thinking, hosted tools, images, API, route, stream ...);
* retries, as the capture reads them (:mod:`modeltap.evidence.capture.retries`, the
  rule ``modeltap report`` uses too): a turn that sends again the request of
  an attempt that had just failed is marked a retry of it, so a retried call
  reads as one call with several attempts, not as unrelated turns;
* turn numbers from 1 (``number``, like ``seq`` and every message); ``index``
  is the 0-based position the page links by;
* each tool call's MCP execution (``execution``, ``null`` when none was
  observed) with its start ``t``, and the session's ``mcp_executions`` and
  ``denied_tool_calls`` (SPEC 3b);
* times as milliseconds since the epoch, so the page draws the timeline
  without parsing dates.

Unknown stays unknown: a ``None`` is written as JSON ``null`` and the page
shows it as unknown, never as 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from modeltap import __version__
from modeltap.evidence.capture import (
    CHANNELS,
    Capture,
    EvidenceCoverage,
    McpExecution,
    Session,
    Turn,
    TurnQueries,
)
from modeltap.evidence.records import AuditRecord, HostedTool, utc_now

Json = dict[str, Any]

#: The page data's format; the page checks it before drawing.
FORMAT: Final = "modeltap-view/1"

#: Attribute names a cost estimate may have on a turn, session or capture
#: (SPEC section 5: cost per exchange, turn and session). The first present
#: one is copied; ``None`` is copied too (unknown, never 0).
_COST_ATTRIBUTES: Final = ("cost", "cost_estimate", "estimated_cost")
_ABSENT: Final = object()


def epoch_ms(ts: str | None) -> float | None:
    """Milliseconds since the epoch of an ISO-8601 timestamp.

    Args:
        ts: a ``ts`` field (``2026-12-01T08:57:23.503Z``), or ``None``.

    Returns:
        The time, or ``None`` when ``ts`` is missing, unparsable or has no
        time zone (the page cannot place it then).
    """
    if ts is None:
        return None
    try:
        parsed = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return round(parsed.timestamp() * 1000, 3)


def coverage_json(coverage: EvidenceCoverage) -> Json:
    """The six channels as ``{channel: {"status", "reasons": [...]}}``."""
    out: Json = {}
    for name in CHANNELS:
        channel = coverage.channel(name)
        out[name] = {"status": channel.status, "reasons": list(channel.reasons)}
    return out


def usage_json(owner: Turn | TurnQueries) -> Json:
    """Usage under ``events.jsonl``'s names; ``total_tokens`` is the total the
    capture gives (summed from the parts for a wire that reports none, then
    ``total_summed`` is true)."""
    out: Json = dataclasses.asdict(owner.usage)
    out["total_tokens"] = owner.total_tokens
    out["total_summed"] = owner.total_summed and owner.total_tokens is not None
    return out


def _cost(owner: object) -> Json:
    """``{"cost": value}`` when ``owner`` has a cost estimate attribute, else ``{}``."""
    for name in _COST_ATTRIBUTES:
        value = getattr(owner, name, _ABSENT)
        if value is not _ABSENT and not callable(value):
            return {"cost": _plain(value)}
    return {}


def _plain(value: Any) -> Any:
    """A dataclass (or a tuple of them) as JSON types; other values as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


# --------------------------------------------------------------------------
# What changed between two turns


def _hosted_key(tool: HostedTool) -> str:
    return f"{tool.type}:{tool.name}" if tool.name else tool.type


def _short(sha: str | None) -> str:
    return "not stated" if sha is None else sha[:12]


def _setting(value: Any) -> str:
    if value is None:
        return "not sent"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "{}"
    return str(value)


def _change(what: str, text: str, **extra: Any) -> Json:
    return {"what": what, "text": text, **extra}


def _value_change(
    what: str, label: str, before: Any, after: Any, shown: Callable[[Any], str] = str
) -> list[Json]:
    """``label: before -> after`` (each as ``shown`` writes it) when the value changed."""
    if before == after:
        return []
    return [
        _change(what, f"{label}: {shown(before)} -> {shown(after)}", before=before, after=after)
    ]


def _list_changes(
    what: str, noun: str, before: tuple[str, ...] | None, after: tuple[str, ...] | None
) -> list[Json]:
    """Items added and removed between two lists; ``None`` is "not stated"."""
    if before is None and after is None:
        return []
    if after is None:
        return [
            _change(
                what,
                f"{noun} not stated in this request (a continuation: the server holds them)",
                kind="unstated",
            )
        ]
    if before is None:
        return [
            _change(
                what,
                f"{noun} stated again: {', '.join(after) or 'none'}",
                kind="stated",
                added=list(after),
            )
        ]
    added = [name for name in after if name not in before]
    removed = [name for name in before if name not in after]
    out: list[Json] = []
    if added:
        out.append(_change(what, f"{noun} added: {', '.join(added)}", kind="added", items=added))
    if removed:
        out.append(
            _change(what, f"{noun} removed: {', '.join(removed)}", kind="removed", items=removed)
        )
    if not added and not removed and list(before) != list(after):
        out.append(_change(what, f"{noun} reordered", kind="reordered", items=list(after)))
    return out


def turn_changes(previous: AuditRecord | None, current: AuditRecord) -> list[Json]:
    """What changed in a request from the previous request of its session.

    Compares the audit facts a reader of an agent cares about between turns:
    model, reasoning effort, thinking, the client tools advertised (added,
    removed, reordered, or not stated on a continuation), hosted tools, the
    instructions hash (and its parts, when the record has them), image count,
    API, transport, route, stream and the settings a continuation did not
    state. Each change is ``{"what", "text", ...}`` with ``text`` in plain
    words.

    Args:
        previous: the previous turn's record, or ``None`` for a session's first turn.
        current: this turn's record.

    Returns:
        The changes, in a fixed order; ``[]`` when nothing of the above changed.
    """
    if previous is None:
        return []
    out = _value_change("model", "model changed", previous.model, current.model)
    out += _value_change(
        "reasoning_effort",
        "effort changed",
        previous.reasoning_effort,
        current.reasoning_effort,
        shown=_setting,
    )
    out += _value_change(
        "thinking", "thinking changed", previous.thinking, current.thinking, shown=_setting
    )
    out.extend(_list_changes("tools", "tools", previous.tool_names, current.tool_names))
    out.extend(
        _list_changes(
            "hosted_tools",
            "hosted tools",
            tuple(_hosted_key(t) for t in previous.hosted_tools),
            tuple(_hosted_key(t) for t in current.hosted_tools),
        )
    )
    if previous.instructions_sha256 != current.instructions_sha256:
        out += _value_change(
            "instructions",
            "instructions hash changed",
            previous.instructions_sha256,
            current.instructions_sha256,
            shown=_short,
        )
        out.extend(_parts_changes(previous, current))
    out += _value_change("images", "images", previous.image_count, current.image_count)
    for what, label in (
        ("api", "API"),
        ("transport", "transport"),
        ("route", "route"),
        ("stream", "stream"),
    ):
        out += _value_change(
            what, f"{label} changed", getattr(previous, what), getattr(current, what)
        )
    for what in ("provider",):  # written by newer modeltap versions
        out += _value_change(
            what, f"{what} changed", getattr(previous, what, None), getattr(current, what, None)
        )
    if previous.omitted_settings != current.omitted_settings:
        omitted = ", ".join(current.omitted_settings) or "none"
        out.append(
            _change(
                "omitted_settings",
                f"settings not stated: {omitted}",
                before=list(previous.omitted_settings),
                after=list(current.omitted_settings),
            )
        )
    return out


def _parts_changes(previous: AuditRecord, current: AuditRecord) -> list[Json]:
    """Which instruction parts changed, when the records list them (``instructions_parts``)."""
    before = _part_hashes(getattr(previous, "instructions_parts", None))
    after = _part_hashes(getattr(current, "instructions_parts", None))
    if before is None or after is None:
        return []
    changed = [
        i
        for i in range(max(len(before), len(after)))
        if i >= len(before) or i >= len(after) or before[i] != after[i]
    ]
    if not changed:
        return []
    return [
        _change(
            "instructions_parts",
            f"instruction parts changed: {', '.join(f'#{i + 1}' for i in changed)} of {len(after)}",
            items=changed,
        )
    ]


def _part_hashes(parts: Any) -> list[str] | None:
    if not isinstance(parts, list | tuple):
        return None
    out: list[str] = []
    for part in parts:
        sha = part.get("sha256") if isinstance(part, dict) else getattr(part, "sha256", None)
        out.append(str(sha))
    return out


# --------------------------------------------------------------------------
# Turns, sessions, the capture


def _turn_json(turn: Turn, previous: Turn | None, attempts: int | None) -> Json:
    record, response = turn.record, turn.response
    start = epoch_ms(record.ts)
    end = epoch_ms(response.ts) if response is not None else None
    out: Json = {
        "index": turn.index,
        "number": turn.number,
        "seq": record.seq,
        "t": start,
        "end": end,
        "record": dataclasses.asdict(record),
        "response": dataclasses.asdict(response) if response is not None else None,
        "errors": turn.errors,
        "error_events": [dataclasses.asdict(e) for e in turn.error_events],
        "evidence_complete": turn.evidence_complete,
        "capture_errors": turn.capture_errors,
        "coverage": coverage_json(turn.coverage),
        "usage": usage_json(turn),
        "invocations": [
            {
                "name": inv.name,
                "call_id": inv.call.call_id,
                "namespace": inv.call.namespace,
                "arguments": inv.call.arguments,
                "answered": inv.answered,
                "result_turn_index": inv.result_turn_index,
                "result_bytes": inv.result_bytes,
                "result_is_error": inv.result_is_error,
                "duration_ms": inv.duration_ms,
                "failed": inv.failed,
                "execution": _execution_json(inv.execution),
            }
            for inv in turn.tool_invocations
        ],
        "changes": turn_changes(previous.record if previous else None, record),
        "retry_of": turn.retry_of,
        "attempt": turn.attempt,
        "first_attempt": turn.first_attempt,
        "attempts": attempts,
    }
    out.update(_cost(turn))
    return out


def _execution_json(execution: McpExecution | None) -> Json | None:
    """The MCP execution that ran a call (SPEC 3b), placed in time; ``None``:
    none was observed (which the page says, never "ok")."""
    if execution is None:
        return None
    return {**execution.to_json(), "t": epoch_ms(execution.record.ts)}


def _session_json(session: Session) -> Json:
    # A first attempt counts the attempts of its call; a retry has None.
    attempts: dict[int, int] = {}
    for turn in session.turns:
        first = turn.index if turn.first_attempt is None else turn.first_attempt
        attempts[first] = attempts.get(first, 0) + 1
    turns: list[Json] = []
    previous: Turn | None = None
    for turn in session.turns:
        count = None if turn.is_retry else attempts.get(turn.index, 1)
        turns.append(_turn_json(turn, previous, count))
        previous = turn

    models: dict[str, None] = {}
    for turn in session.turns:
        models.setdefault(turn.model, None)
    called: dict[str, None] = {}
    for inv in session.tool_invocations:
        if inv.name is not None:
            called.setdefault(inv.name, None)
    # The timeline spans what happened in the session; its sessions.jsonl line
    # is often written much later (when the proxy stops), so it counts only
    # when nothing else has a time.
    times = [
        t
        for t in (
            *(item["t"] for item in turns),
            *(item["end"] for item in turns),
            *(epoch_ms(e.ts) for e in session.events),
        )
        if t is not None
    ] or [t for t in (epoch_ms(e.ts) for e in session.ends) if t is not None]
    out: Json = {
        "id": session.session_id,
        "run_ids": list(session.run_ids),
        "stop_reason": session.stop_reason,
        "ends": [dataclasses.asdict(end) for end in session.ends],
        "evidence_complete": session.evidence_complete,
        "capture_errors": session.capture_errors,
        "error_messages": session.error_messages,
        "coverage": coverage_json(session.coverage),
        "usage": usage_json(session),
        "execution_time_ms": session.execution_time_ms,
        "start": min(times) if times else None,
        "stop": max(times) if times else None,
        "models": list(models),
        "tools_advertised": session.tools_advertised(),
        "tools_called": list(called),
        "turns": turns,
        "refusals": [{**dataclasses.asdict(e), "t": epoch_ms(e.ts)} for e in session.refusals],
        "errors": [{**dataclasses.asdict(e), "t": epoch_ms(e.ts)} for e in session.errors],
        "unaudited": [{**dataclasses.asdict(e), "t": epoch_ms(e.ts)} for e in session.unaudited],
        "mcp_executions": [
            {
                **(_execution_json(e) or {}),
                "call": None
                if e.call is None
                else {"turn_index": e.call[0], "position": e.call[1]},
            }
            for e in session.mcp_executions
        ],
        "denied_tool_calls": [d.to_json() for d in session.denied_tool_calls],
    }
    out.update(_cost(session))
    return out


def build_view_data(capture: Capture, *, title: str | None = None) -> Json:
    """The page data of a capture: JSON types only.

    Args:
        capture: a loaded capture.
        title: the page title (default: the capture's directory).

    Returns:
        ``{"format", "title", "generated_at", "modeltap_version", "capture",
        "sessions"}``: per session its status, coverage, usage, refusals and
        errors outside turns, and its turns with their audit record, response
        event, tool invocations, coverage, changes from the previous turn and
        retry grouping.
    """
    sessions = [_session_json(s) for s in capture.sessions.values()]
    models: dict[str, None] = {}
    advertised: dict[str, None] = {}
    called: dict[str, None] = {}
    for s in sessions:
        for model in s["models"]:
            models.setdefault(model, None)
        for name in s["tools_advertised"]:
            advertised.setdefault(name, None)
        for name in s["tools_called"]:
            called.setdefault(name, None)
    summary: Json = {
        "directory": str(capture.directory),
        "run_ids": capture.run_ids,
        "evidence_complete": capture.evidence_complete,
        "capture_errors": capture.capture_errors,
        "coverage": coverage_json(capture.coverage),
        "usage": usage_json(capture),
        "load_errors": [str(e) for e in capture.load_errors],
        "models": list(models),
        "tools_called": list(called),
        "tools_advertised": list(advertised),
        "turns": sum(len(s["turns"]) for s in sessions),
        "refusals": sum(len(s["refusals"]) for s in sessions),
    }
    summary.update(_cost(capture))
    return {
        "format": FORMAT,
        "title": title if title is not None else str(capture.directory),
        "generated_at": utc_now(),
        "modeltap_version": __version__,
        "capture": summary,
        "sessions": sessions,
    }
