"""``modeltap report DIR [--json]``: what a capture holds, per session and per turn.

:func:`build_report` turns a :class:`~modeltap.capture.Capture` into a JSON-able
dict (its shape is ``schemas/report.schema.json``); :func:`render_text` prints
that dict for a terminal; :func:`main` is the command (``cli.py`` delegates
to it).

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
  had just failed (:mod:`modeltap.capture.retries`) has ``retry_of_turn``
  (the attempt it repeats), ``attempt`` (2, 3, ...) and
  ``first_attempt_turn``; a first attempt has ``retry_of_turn: null`` and
  ``attempt: 1``. Every attempt stays a turn (each was a real request).

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
``counts.pass_through`` counts them.

Evidence coverage (computed by :mod:`modeltap.coverage`, the same code that
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
          (the reason names the call), a call has no ``call_id``, or the
          response listing the calls is missing or incomplete
messages  unavailable: "message content is not recorded (names, counts
          and hashes only)"
usage     unavailable: no usage for a turn ("no response" when the
          upstream never answered, an error answer, or every count null);
          partial: a count the provider's wire carries is null (the reason
          lists them; a count a wire never carries, such as OpenAI's cache
          writes, is not missing: ``WireApi.REPORTED_USAGE``)
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
``status`` and ``data`` are all complete (see :mod:`modeltap.capture`).

A little over 500 lines, on purpose: the JSON builder and the text renderer
sit side by side so a change of the report's shape is made once, in one
file, for both outputs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final

import orjson

from modeltap.capture import (
    CHANNELS,
    Capture,
    EvidenceCoverage,
    Session,
    ToolInvocation,
    Turn,
)
from modeltap.coverage import refusal_text, turn_number
from modeltap.records import USAGE_COUNTS, Cost, Usage

REPORT_VERSION: Final = 1

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
    return {
        "name": inv.name,
        "call_id": inv.call.call_id,
        "args": tool_arguments(inv.call.arguments),
        "result": None,  # content is not recorded
        "bytes": inv.result_bytes,
        "duration_ms": inv.duration_ms,
        "result_turn_index": inv.result_turn_index,
        "result_turn": (
            None if inv.result_turn_index is None else turn_number(inv.result_turn_index)
        ),
    }


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
            {"call_id": result.call_id, "bytes": result.bytes} for result in record.tool_results
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
# Text


UNKNOWN: Final = "?"
#: Marks a total modeltap summed from the reported parts (the wire has none).
SUMMED: Final = "*"


def _count(value: int | None) -> str:
    return UNKNOWN if value is None else f"{value:,}"


def _total(usage: Json) -> str:
    return _count(usage["total_tokens"]) + (SUMMED if usage.get("total_summed") else "")


def _duration(ms: float | None) -> str:
    if ms is None:
        return UNKNOWN
    if abs(ms) < 1000:
        return f"{ms:.0f} ms"
    if abs(ms) < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def _size(n: int | None) -> str:
    if n is None:
        return UNKNOWN
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def _table(rows: list[list[str]], right: set[int], indent: str = "  ") -> list[str]:
    """Align ``rows`` in columns; ``right`` holds the right-aligned column indexes."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def table_lines(rows: list[list[str]], right: set[int], indent: str = "  ") -> list[str]:
    """Align ``rows`` in columns the way the report's tables are, for other
    commands' screens (``modeltap demo``'s records).

    Args:
        rows: cells of each row (the first row is the header), all of one length.
        right: indexes of the right-aligned columns (numbers).
        indent: put before every line.

    Returns:
        One line per row, trailing spaces removed.
    """
    return _table(rows, right, indent)


def _dollars(cost: Json | None) -> str:
    """An estimate as ``$0.000202``; ``?`` when unknown."""
    if cost is None or cost["estimate_usd"] is None:
        return UNKNOWN
    return f"${cost['estimate_usd']:.6f}".rstrip("0").rstrip(".") if cost["estimate_usd"] else "$0"


def _cost_line(cost: Json | None) -> str:
    if cost is None:
        return UNKNOWN
    why = f" ({cost['note']})" if cost["note"] else ""
    return f"{_dollars(cost)} estimated by {cost['source']}{why}"


def _usage_line(usage: Json) -> str:
    return (
        f"in {_count(usage['input_tokens'])}  out {_count(usage['output_tokens'])}  "
        f"total {_total(usage)}  cache read {_count(usage['cache_read_tokens'])}  "
        f"cache write {_count(usage['cache_write_tokens'])}  "
        f"reasoning {_count(usage['reasoning_tokens'])}"
    )


def _coverage_lines(coverage: Json, indent: str) -> list[str]:
    width = max(len(name) for name in CHANNELS)
    status_width = max(len(coverage[name]["status"]) for name in CHANNELS)
    lines = []
    for name in CHANNELS:
        entry = coverage[name]
        head = f"{indent}{name.ljust(width)}  "
        reasons = entry.get("reasons") or ([entry["reason"]] if "reason" in entry else [])
        if not reasons:
            lines.append(f"{head}{entry['status']}")
            continue
        lines.append(f"{head}{entry['status'].ljust(status_width)}  {reasons[0]}")
        pad = " " * (len(head) + status_width + 2)
        lines.extend(f"{pad}{reason}" for reason in reasons[1:])
    return lines


def _turn_row(turn: Json, retries: bool) -> list[str]:
    usage = turn["token_usage"]
    tools = turn["tools_advertised"]
    status = turn["http_status"]
    calls = [name or "(unnamed)" for name in turn["tool_calls"]]
    retry = turn["retry_of_turn"]
    return [
        str(turn["turn"]),
        *([("" if retry is None else str(retry))] if retries else []),
        turn["model"],
        turn["provider"] or UNKNOWN,
        "-" if status is None else str(status),
        UNKNOWN if tools is None else str(len(tools)),
        _count(usage["input_tokens"]),
        _count(usage["output_tokens"]),
        _total(usage),
        _dollars(turn["cost"]),
        _duration(turn["execution_time_ms"]),
        "complete" if turn["evidence_complete"] else "partial",
        ", ".join(calls) or "-",
    ]


def _session_lines(session: Json) -> list[str]:
    runs = ", ".join(session["run_ids"])
    stop = session["stop_reason"] or "not recorded"
    lines = [f"session {session['session_id']}   run {runs}   stop: {stop}"]
    tools = session["tools_advertised"]
    if tools:
        lines.append(f"  tools advertised ({len(tools)}): {', '.join(tools)}")
    if session["turns"]:
        retries = bool(session["retry_count"])
        header = ["turn", *(["retry of"] if retries else []), "model", "provider", "http"]
        header += ["tools", "in", "out", "total", "est. $", "time", "evidence"]
        rows = [[*header, "calls"]]
        rows.extend(_turn_row(turn, retries) for turn in session["turns"])
        usage = session["token_usage"]
        calls = len(session["tool_calls"])
        rows.append(
            [
                "all",
                *([""] if retries else []),
                "",
                "",
                "",
                "",
                _count(usage["input_tokens"]),
                _count(usage["output_tokens"]),
                _total(usage),
                _dollars(session["cost"]),
                _duration(session["execution_time_ms"]),
                "complete" if session["evidence_complete"] else "partial",
                f"{calls} call{'s' if calls != 1 else ''}",
            ]
        )
        shift = 1 if retries else 0
        lines.append("")
        lines.extend(_table(rows, right={0, *(i + shift for i in (3, 4, 5, 6, 7, 8, 9))}))
        lines.extend(_retry_lines(session["turns"]))
    invocations = session["tool_invocations"]
    if invocations:
        lines += ["", "  tool results"]
        rows = []
        for turn in session["turns"]:
            for inv in turn["tool_invocations"]:
                answered = inv["result_turn"] is not None
                rows.append(
                    [
                        f"turn {turn['turn']}",
                        inv["name"] or "(unnamed)",
                        inv["call_id"] or "(no call_id)",
                        f"-> turn {inv['result_turn']}" if answered else "no result",
                        _size(inv["bytes"]) if answered else "",
                        _duration(inv["duration_ms"]) if answered else "",
                    ]
                )
        lines.extend(_table(rows, right={4, 5}, indent="    "))
    lines += ["", f"  usage     {_usage_line(session['token_usage'])}"]
    lines.append(f"  cost      {_cost_line(session['cost'])}")
    refused = [refusal_text(r["rule"], r["message"]) for r in session["refusals"]]
    if refused:
        lines += ["", f"  refusals ({len(refused)})"]
        lines.extend(
            f"    {r['ts']}  {text}" for r, text in zip(session["refusals"], refused, strict=True)
        )
    # Each error once: refusals have their block above.
    errors = list(session["errors"])
    for text in refused:
        if text in errors:
            errors.remove(text)
    if errors:
        lines += ["", "  errors"]
        lines.extend(f"    {error}" for error in errors)
    lines += ["", "  coverage"]
    lines.extend(_coverage_lines(session["coverage"], indent="    "))
    return lines


def _retry_lines(turns: list[Json]) -> list[str]:
    """One line per retried call: which turns were attempts of it, and how it ended."""
    attempts: dict[int, list[Json]] = {}
    for turn in turns:
        attempts.setdefault(turn["first_attempt_turn"], []).append(turn)
    lines: list[str] = []
    for first, group in attempts.items():
        if len(group) < 2:
            continue
        numbers = ", ".join(str(t["turn"]) for t in group)
        last = group[-1]
        status = last["http_status"]
        outcome = (
            "the last got no answer"
            if status is None
            else f"the last answered HTTP {status}"
            + ("" if last["evidence_complete"] else ", incomplete")
        )
        lines.append(
            f"  retried   turn {first}'s request was sent {len(group)} times "
            f"(turns {numbers}); {outcome}"
        )
    return lines


def render_text(report: Json) -> str:
    """Render a report built by :func:`build_report` for a terminal.

    Args:
        report: the dict :func:`build_report` returned (or its JSON, parsed).

    Returns:
        Aligned plain text ending in a newline; ``?`` marks unknown values.
    """
    counts = report["counts"]
    evidence = "complete" if report["evidence_complete"] else "INCOMPLETE"
    retries = counts.get("retries", 0)
    turns = f"turns {counts['turns']}" + (
        f" ({retries} {'retry' if retries == 1 else 'retries'})" if retries else ""
    )
    lines = [
        f"modeltap report  {report['directory']}",
        (
            f"runs {len(report['run_ids'])}   sessions {counts['sessions']}   "
            f"{turns}   refusals {counts['refusals']}   "
            f"unreadable lines {counts['load_errors']}   evidence {evidence}"
        ),
    ]
    if report["load_errors"]:
        lines += ["", "unreadable lines"]
        lines.extend(
            f"  {e['file']} line {e['line']}: {e['message']}" for e in report["load_errors"]
        )
    for session in report["sessions"]:
        lines += ["", *_session_lines(session)]
    if not report["sessions"]:
        lines += ["", "no sessions: no outbound model requests captured"]
    passed = counts.get("pass_through", 0)
    if passed:
        lines += [
            "",
            f"{passed} unaudited pass-through request{'s' if passed != 1 else ''} "
            "(e.g. GET .../models) outside any session: not model traffic",
        ]
    lines += ["", "? = unknown (not reported or not seen)"]
    if _any_summed(report):
        lines.append(
            f"{SUMMED} = total summed by modeltap from the counts the provider reported "
            "(input, cache read, cache write, output): its API reports no total"
        )
    return "\n".join(lines) + "\n"


def _any_summed(report: Json) -> bool:
    return any(
        turn["token_usage"].get("total_summed")
        for session in report["sessions"]
        for turn in session["turns"]
    )


# --------------------------------------------------------------------------
# Command


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``modeltap report DIR [--json]``.

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
    parser.add_argument("directory", metavar="DIR", help="the --out directory of a run")
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON (report.schema.json)"
    )
    args = parser.parse_args(argv)
    try:
        capture = Capture.load(args.directory)
    except OSError as exc:
        # The message names the path and the OS reason; nothing from the files.
        print(f"modeltap report: error: {exc}", file=sys.stderr)
        return 2
    report = build_report(capture)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_text(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
