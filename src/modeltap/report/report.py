"""``modeltap report [DIR] [--json]``: what a capture holds, per session and per turn.

:func:`build_report` turns a :class:`~modeltap.evidence.capture.Capture` into a JSON-able
dict (its shape is ``schemas/report.schema.json``); :func:`render_text`
(:mod:`modeltap.report.text`) prints that dict for a terminal; :func:`main` is
the command (:mod:`modeltap.app.cli` delegates to it).

One audited request is one model turn. Turns are numbered from 1, like
``seq``: ``turn`` (and ``[turn N]`` in every message, ``result_turn``,
``retry_of_turn``) is that number; the ``*_index`` fields are 0-based
positions in the ``turns`` list, as the TurnResult shape of a multi-turn test
result has them. A turn follows that shape wherever a field applies:
``turn_index``, ``tool_calls`` (qualified names), ``tool_invocations``
(``name``, ``call_id``, ``args``, ``result``, ``bytes``, ``duration_ms``,
``result_turn_index``, ``result_turn``), ``token_usage``, ``errors``,
``execution_time_ms``. Verdict fields (passed,
metrics) do not apply: these are execution facts, not a judgement of the
agent. Content fields (``input``, ``response``, a call's ``result``) are
``null``: this version records names, counts and hashes, never content.

* A tool call's result is looked for in the ``tool_results`` of the later
  requests of the session, by ``call_id`` (normally the very next request).
  ``bytes`` is the result's size as sent; ``duration_ms`` runs from the ``ts``
  of the response event that asked for the call (written when that response
  ended) to the ``ts`` of the request that carried the result back.
* ``args`` is the call's arguments parsed as a JSON object when they are one,
  else the arguments string as the model sent it (custom tools send free
  text), ``null`` when none were seen.
* ``token_usage``: the counts under the names ``events.jsonl`` gives them
  (``input_tokens``, ``output_tokens``, ``total_tokens``,
  ``cache_read_tokens``, ``cache_write_tokens``, ``reasoning_tokens``; the
  provider's own numbers, each ``null`` when not reported), except
  ``total_tokens`` for a wire that reports no total (Anthropic): there it is
  the sum of the parts the provider reported (input, cache reads and writes,
  output; ``null`` unless all are known), and ``total_summed`` is true.
  ``execution_time_ms`` is the response's ``duration_ms``.
* Retries: a turn that sends again the request of an earlier attempt that
  had just failed (:mod:`modeltap.evidence.capture.retries`) has ``retry_of_turn``
  (the attempt it repeats), ``attempt`` (2, 3, ...) and
  ``first_attempt_turn``; a first attempt has ``retry_of_turn: null`` and
  ``attempt: 1``. Every attempt stays a turn (each was a real request).

* MCP (SPEC 3b): a tool call's ``execution`` is the MCP ``tools/call``
  that ran it, when one was seen (``server``, ``tool``, ``seq``,
  ``jsonrpc_id``, ``outcome``: ``result``, ``tool_error`` for ``isError:
  true``, ``error`` for a JSON-RPC error, ``http_error``, or ``null`` when
  no answer was seen; ``failed``, sizes and types, never content), else
  ``null``: not observed, never a success. ``failed`` says whether the call
  failed as far as its execution or its result's flag tell (``null``:
  neither does). A session lists every ``mcp_executions`` (each with the
  model ``call`` it ran, ``null`` when none asked for it), counts
  ``tool_errors`` (an HTTP 200 carrying a JSON-RPC error or ``isError:
  true`` is one) and ``tool_outcomes_unknown``, and lists the
  ``denied_tool_calls``: ``tools/call`` messages refused before their
  server saw them (``rule``, ``server``, ``tool``, ``jsonrpc_id``).

* ``cost``: the turn's estimated price (``estimate_usd``, ``source``,
  ``priced_as``, ``note``), an estimate by a price table, ``null`` without a
  response; ``estimate_usd`` is ``null`` (never 0) when it could not be priced.

Session roll-up: ``tool_calls`` and ``tool_invocations`` flattened in turn
order; ``token_usage`` summed element-wise, a sum being ``null`` when any
turn's count is unknown (a known zero stays zero); ``cost`` summed, its
estimate ``null`` when any turn could not be priced; ``execution_time_ms`` the
sum of the turns' (``null`` if any is unknown); ``errors`` are the turns'
errors prefixed ``[turn N]`` (each once per turn), then refusals and errors
outside any turn; ``retry_count`` counts the retries.

Requests passed through unaudited by ids that saw no model traffic (an SDK's
``GET .../models`` without a session header) are no session: the capture's
``pass_through`` lists them (``ts``, ``session_id``, ``method``, ``path``,
``status``) and ``counts.pass_through`` counts them.

Evidence coverage (computed by :mod:`modeltap.evidence.coverage`, the same code that
wrote ``evidence_complete`` into ``sessions.jsonl``), six channels per turn,
session and capture, each
``{"status": "complete"}`` or ``{"status": "partial" | "unavailable",
"reason": ...}``. A turn can only lower a channel; a session is the worst over
its turns (reasons prefixed ``[turn N]``, or ``[turns 1-3]`` when shared) plus
what happened outside them; the capture is the worst over its sessions.

========  ==============================================================
channel   lowered when
========  ==============================================================
events    partial: no response event for a request, or the response was
          not seen completely (``evidence_complete: false``; its
          ``capture_errors`` are the reason), or ``sessions.jsonl`` says
          the session's evidence was incomplete
actions   partial: a tool call never got its result in a later request
          and no MCP execution of it was seen whole (the reason names the
          call, and whether MCP traffic was seen at all), a call has no
          ``call_id``, an MCP execution ran no call the model asked for, or
          the response listing the calls is missing or incomplete
messages  unavailable: "message content is not recorded (names, counts
          and hashes only)"
usage     unavailable: no usage for a turn ("no response" when the
          upstream never answered, an error answer, or every count null),
          and for a session only when no turn has any;
          partial: a count the provider's wire carries is null (the reason
          lists them; a count a wire never carries, such as OpenAI's cache
          writes, is not missing: ``WireApi.REPORTED_USAGE``), or a session
          some of whose turns have usage and some not (``usage_status``)
status    partial: a request was refused (``rejected`` event), an
          ``error`` event happened, or a request's outcome is unknown
data      partial: a line could not be read (``load_errors``; this lowers
          every session, the lost line may have been its own) or lines do
          not link up (an event's ``seq`` with no audit record, or
          ``sessions.jsonl`` counts other than what the files hold)
========  ==============================================================

A session without any audited request has ``events``, ``actions``, ``usage``
and ``status`` unavailable: "No outbound model requests captured; audit
unsupported". ``evidence_complete`` is true when ``events``, ``actions``,
``status`` and ``data`` are all complete (see :mod:`modeltap.evidence.capture`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final

import orjson

from modeltap.evidence.capture import (
    Capture,
    EvidenceCoverage,
    McpExecution,
    Session,
    ToolInvocation,
    Turn,
)
from modeltap.evidence.coverage import turn_number
from modeltap.evidence.records import DEFAULT_OUT, USAGE_COUNTS, Cost, Usage
from modeltap.report.terminal import print_document, print_lines
from modeltap.report.text import render_text

REPORT_VERSION: Final = 1

__all__ = [
    "REPORT_VERSION",
    "build_report",
    "cost_json",
    "main",
    "render_text",
    "token_usage",
    "tool_arguments",
]

Json = dict[str, Any]


# --------------------------------------------------------------------------
# The JSON report


def token_usage(
    usage: Usage, total: int | None = None, *, summed: bool = False
) -> dict[str, int | bool | None]:
    """Usage as the report writes it: the names of ``events.jsonl``'s ``usage``.

    Args:
        usage: usage as recorded (each count ``None`` when unknown).
        total: the total to write; by default the recorded ``total_tokens``.
        summed: whether ``total`` was summed by modeltap from the reported
            parts (the provider's wire has no total).

    Returns:
        ``input_tokens``, ``output_tokens``, ``total_tokens``,
        ``cache_read_tokens``, ``cache_write_tokens``, ``reasoning_tokens``
        and ``total_summed``.
    """
    out: dict[str, int | bool | None] = {name: getattr(usage, name) for name in USAGE_COUNTS}
    if summed:
        out["total_tokens"] = total
    out["total_summed"] = summed and total is not None
    return out


def cost_json(cost: Cost | None) -> Json | None:
    """An estimated price as the report writes it (``null`` when there is none)."""
    if cost is None:
        return None
    return {
        "estimate_usd": cost.estimate_usd,
        "source": cost.source,
        "priced_as": cost.priced_as,
        "note": cost.note,
    }


def tool_arguments(arguments: str | None) -> Any:
    """Return the arguments as a JSON object when they are one, else as sent.

    Args:
        arguments: the arguments string the model sent, or ``None``.

    Returns:
        A dict when ``arguments`` is a JSON object; otherwise the string
        unchanged (free-text custom tool input, or malformed JSON kept as
        evidence); ``None`` when no arguments were seen.
    """
    if arguments is None:
        return None
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    return parsed if isinstance(parsed, dict) else arguments


def _invocation_json(inv: ToolInvocation) -> Json:
    execution = inv.execution
    return {
        "name": inv.name,
        "call_id": inv.call.call_id,
        "args": tool_arguments(inv.call.arguments),
        "result": None,  # content is not recorded
        "bytes": inv.result_bytes,
        "is_error": inv.result_is_error,
        "duration_ms": inv.duration_ms,
        "result_turn_index": inv.result_turn_index,
        "result_turn": (
            None if inv.result_turn_index is None else turn_number(inv.result_turn_index)
        ),
        "execution": execution.to_json() if execution is not None else None,
        "failed": inv.failed,
    }


def _execution_json(execution: McpExecution, session: Session) -> Json:
    call: Json | None = None
    if execution.call is not None:
        turn_index, position = execution.call
        asked = session.turns[turn_index].tool_invocations[position]
        call = {"turn": turn_number(turn_index), "name": asked.name, "call_id": asked.call.call_id}
    return {**execution.to_json(), "call": call}


def _tool_errors(session: Session) -> tuple[int, int]:
    """How many tool calls failed, and how many have no known outcome (each
    model call with its execution once, plus executions no model asked for)."""
    outcomes = [inv.failed for inv in session.tool_invocations]
    outcomes += [execution.failed for execution in session.unasked_executions]
    return sum(1 for o in outcomes if o is True), sum(1 for o in outcomes if o is None)


def _coverage_json(coverage: EvidenceCoverage) -> Json:
    return coverage.to_json()


def _turn_json(turn: Turn) -> Json:
    record, response = turn.record, turn.response
    return {
        "turn_index": turn.index,
        "turn": turn.number,
        "retry_of_turn": None if turn.retry_of is None else turn_number(turn.retry_of),
        "attempt": turn.attempt,
        "first_attempt_turn": turn_number(
            turn.index if turn.first_attempt is None else turn.first_attempt
        ),
        "seq": record.seq,
        "run_id": record.run_id,
        "request_id": record.request_id,
        "ts": record.ts,
        "api": record.api,
        "operation": record.operation,
        "provider": record.provider,
        "transport": record.transport,
        "model": record.model,
        "model_source": record.model_source,
        "response_model": response.model if response else None,
        "http_status": response.status if response else None,
        "response_status": response.response_status if response else None,
        "finish_reasons": (
            list(response.finish_reasons)
            if response and response.finish_reasons is not None
            else None
        ),
        "input": None,
        "response": None,
        "tools_advertised": list(record.tool_names) if record.tool_names is not None else None,
        "tool_calls": [inv.name for inv in turn.tool_invocations],
        "tool_invocations": [_invocation_json(inv) for inv in turn.tool_invocations],
        "tool_results_sent": [
            {"call_id": result.call_id, "bytes": result.bytes, "is_error": result.is_error}
            for result in record.tool_results
        ],
        "token_usage": token_usage(turn.usage, turn.total_tokens, summed=turn.total_summed),
        "cost": cost_json(turn.cost),
        "execution_time_ms": turn.execution_time_ms,
        "ttfb_ms": response.ttfb_ms if response else None,
        "ttft_ms": response.ttft_ms if response else None,
        "errors": turn.errors,
        "evidence_complete": turn.evidence_complete,
        "capture_errors": turn.capture_errors,
        "coverage": _coverage_json(turn.coverage),
    }


def _session_json(session: Session) -> Json:
    models: dict[str, None] = {}
    for turn in session.turns:
        models.setdefault(turn.model, None)
    errors, unknown = _tool_errors(session)
    return {
        "session_id": session.session_id,
        "run_ids": list(session.run_ids),
        "stop_reason": session.stop_reason,
        "models": list(models),
        "tools_advertised": session.tools_advertised(),
        "turn_count": len(session.turns),
        "retry_count": session.retries,
        "tool_calls": [inv.name for inv in session.tool_invocations],
        "tool_invocations": [_invocation_json(inv) for inv in session.tool_invocations],
        "token_usage": token_usage(
            session.usage, session.total_tokens, summed=session.total_summed
        ),
        "cost": cost_json(session.cost),
        "execution_time_ms": session.execution_time_ms,
        "errors": session.error_messages,
        "refusals": [
            {
                "ts": e.ts,
                "rule": e.rule,
                "message": e.message,
                "transport": e.transport,
                "method": e.method,
                "path": e.path,
            }
            for e in session.refusals
        ],
        "unaudited_count": len(session.unaudited),
        "mcp_executions": [_execution_json(e, session) for e in session.mcp_executions],
        "tool_errors": errors,
        "tool_outcomes_unknown": unknown,
        "denied_tool_calls": [denied.to_json() for denied in session.denied_tool_calls],
        "evidence_complete": session.evidence_complete,
        "capture_errors": session.capture_errors,
        "coverage": _coverage_json(session.coverage),
        "turns": [_turn_json(turn) for turn in session.turns],
    }


def build_report(capture: Capture) -> Json:
    """Build the JSON-able report of a capture (``schemas/report.schema.json``).

    Args:
        capture: a loaded capture.

    Returns:
        A dict of JSON types only: per session, per turn, with coverage.
    """
    sessions = [_session_json(s) for s in capture.sessions.values()]
    return {
        "report_version": REPORT_VERSION,
        "directory": str(capture.directory),
        "run_ids": capture.run_ids,
        "counts": {
            "audit_records": len(capture.records),
            "events": len(capture.events),
            "sessions": len(sessions),
            "turns": sum(s["turn_count"] for s in sessions),
            "retries": sum(s["retry_count"] for s in sessions),
            "refusals": sum(len(s["refusals"]) for s in sessions),
            "pass_through": len(capture.pass_through),
            "load_errors": len(capture.load_errors),
        },
        "load_errors": [
            {"file": e.file, "line": e.line, "message": e.message} for e in capture.load_errors
        ],
        "pass_through": [
            {
                "ts": e.ts,
                "session_id": e.session_id,
                "method": e.method,
                "path": e.path,
                "status": e.status,
            }
            for e in capture.pass_through
        ],
        "token_usage": token_usage(
            capture.usage, capture.total_tokens, summed=capture.total_summed
        ),
        "cost": cost_json(capture.cost),
        "evidence_complete": capture.evidence_complete,
        "capture_errors": capture.capture_errors,
        "coverage": _coverage_json(capture.coverage),
        "sessions": sessions,
    }


# --------------------------------------------------------------------------
# Command


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``modeltap report [DIR] [--json]``.

    Args:
        argv: the arguments after ``report`` (``sys.argv[1:]``-style); ``None``
            reads ``sys.argv[1:]``.

    Returns:
        0 when the report was printed (incomplete evidence is reported, not
        an error: ``modeltap check`` gates on it), 2 when the directory
        cannot be read.
    """
    parser = argparse.ArgumentParser(
        prog="modeltap report",
        description=(
            "Summarise a capture directory per session and per turn: models, tools, "
            "tool results, token usage, estimated cost, errors and evidence coverage."
        ),
    )
    parser.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        default=DEFAULT_OUT,
        help=f"the --out directory of a run (default {DEFAULT_OUT}, as modeltap run's)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON (report.schema.json)"
    )
    args = parser.parse_args(argv)
    try:
        capture = Capture.load(args.directory)
    except OSError as exc:
        # The message names the path and the OS reason; nothing from the files.
        print_lines(f"modeltap report: {exc}", stderr=True)
        return 2
    report = build_report(capture)
    if args.json:
        print_document(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_lines(*render_text(report).splitlines())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
