"""``modeltap report`` as text: the report dict, aligned for a terminal (pure).

:func:`render_text` reads only the dict :func:`modeltap.report.report.build_report`
returns (or its JSON, parsed), so the text says nothing the JSON does not.
Per session: a table of turns (numbered from 1; a ``retry of`` column when a
turn retried an earlier attempt, and one line per retried call), tool
results (with the MCP execution that ran each call, when MCP traffic was
seen: ``not observed`` otherwise), MCP executions no model call asked for,
tool errors and denied tool calls, usage (``?`` unknown; ``*`` a total
summed from the reported counts because the provider reports none), cost,
refusals (each once, its rule named once), errors (each once per turn) and
coverage, one reason a line.
"""

from __future__ import annotations

from typing import Any, Final

from modeltap.evidence.coverage import CHANNELS, refusal_text
from modeltap.report.terminal import printable

Json = dict[str, Any]

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


def table_lines(rows: list[list[str]], right: set[int], indent: str = "  ") -> list[str]:
    """Align ``rows`` in columns: the report's tables, and other
    commands' screens (``modeltap demo``'s records).

    Args:
        rows: cells of each row (the first row is the header), all of one length.
        right: indexes of the right-aligned columns (numbers).
        indent: put before every line.

    Returns:
        One line per row, trailing spaces removed.
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _dollars(cost: Json | None) -> str:
    """An estimate as ``$0.000202``; ``?`` when unknown."""
    if cost is None or cost["estimate_usd"] is None:
        return UNKNOWN
    return f"${cost['estimate_usd']:.6f}".rstrip("0").rstrip(".") if cost["estimate_usd"] else "$0"


def _cost_line(cost: Json | None) -> str:
    if cost is None:
        return UNKNOWN
    why = f" ({cost['note']})" if cost["note"] else ""
    # "none": no turn was priced (capture.turns.sum_costs), so no table estimated anything.
    by = "" if cost["source"] == "none" else f" estimated by {cost['source']}"
    return f"{_dollars(cost)}{by}{why}"


def _usage_line(usage: Json, turns: list[Json]) -> str:
    def said(name: str, shown: str) -> str:
        if usage[name] is not None:
            return shown
        # Unknown: some turn did not report it. What the turns that did add up
        # to, said as a lower bound (the page says it the same way).
        known = [t["token_usage"][name] for t in turns if t["token_usage"][name] is not None]
        if not known:
            return shown
        of = f"{len(turns)} turn{'' if len(turns) == 1 else 's'}"
        return f"{shown} ({sum(known):,} in {len(known)} of {of})"

    return (
        f"in {said('input_tokens', _count(usage['input_tokens']))}  "
        f"out {said('output_tokens', _count(usage['output_tokens']))}  "
        f"total {said('total_tokens', _total(usage))}  "
        f"cache read {said('cache_read_tokens', _count(usage['cache_read_tokens']))}  "
        f"cache write {said('cache_write_tokens', _count(usage['cache_write_tokens']))}  "
        f"reasoning {said('reasoning_tokens', _count(usage['reasoning_tokens']))}"
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
        *_measured_cells(turn),
        ", ".join(calls) or "-",
    ]


def _measured_cells(part: Json) -> list[str]:
    """The in, out, total, est. $, time and evidence cells of a turn or a session's total."""
    usage = part["token_usage"]
    return [
        _count(usage["input_tokens"]),
        _count(usage["output_tokens"]),
        _total(usage),
        _dollars(part["cost"]),
        _duration(part["execution_time_ms"]),
        "complete" if part["evidence_complete"] else "partial",
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
        calls = len(session["tool_calls"])
        rows.append(
            [
                "all",
                *([""] if retries else []),
                "",
                "",
                "",
                "",
                *_measured_cells(session),
                f"{calls} call{'s' if calls != 1 else ''}",
            ]
        )
        shift = 1 if retries else 0
        lines.append("")
        lines.extend(table_lines(rows, right={0, *(i + shift for i in (3, 4, 5, 6, 7, 8, 9))}))
        lines.extend(_retry_lines(session["turns"]))
    invocations = session["tool_invocations"]
    executions = session.get("mcp_executions") or []
    if invocations:
        lines += ["", "  tool results"]
        rows = []
        for turn in session["turns"]:
            for inv in turn["tool_invocations"]:
                answered = inv["result_turn"] is not None
                row = [
                    f"turn {turn['turn']}",
                    inv["name"] or "(unnamed)",
                    inv["call_id"] or "(no call_id)",
                    f"-> turn {inv['result_turn']}" if answered else "no result",
                    _size(inv["bytes"]) if answered else "",
                    _duration(inv["duration_ms"]) if answered else "",
                ]
                if executions:
                    row.append(_execution_cell(inv.get("execution")))
                rows.append(row)
        lines.extend(table_lines(rows, right={4, 5}, indent="    "))
    unasked = [e for e in executions if e["call"] is None]
    if unasked:
        lines += ["", f"  MCP executions no model call asked for ({len(unasked)})"]
        lines.extend(f"    seq {e['seq']}  {_execution_cell(e)}" for e in unasked)
    if executions or session.get("tool_errors"):
        unknown = session.get("tool_outcomes_unknown") or 0
        lines += [
            "",
            f"  tool errors  {session.get('tool_errors', 0)}"
            + (f" ({unknown} with no known outcome)" if unknown else ""),
        ]
    denied = session.get("denied_tool_calls") or []
    if denied:
        lines += ["", f"  denied tool calls ({len(denied)})"]
        lines.extend(
            f"    {d['ts']}  {d['tool'] or '(unnamed)'} on {d['server']}: refused ({d['rule']})"
            for d in denied
        )
    lines += ["", f"  usage     {_usage_line(session['token_usage'], session['turns'])}"]
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


def _execution_cell(execution: Json | None) -> str:
    """How an MCP execution ended, in a few words (``not observed`` without one)."""
    if execution is None:
        return "MCP: not observed"
    where = f"{execution['tool']} on {execution['server']}"
    outcome = execution["outcome"]
    if outcome is None:
        return f"MCP {where}: no answer seen"
    said = {
        "result": "ok",
        "tool_error": "isError",
        "error": f"JSON-RPC error {execution['error_code']}",
        "http_error": f"HTTP {execution['http_status']}",
    }.get(outcome, outcome)
    if outcome == "result" and execution["failed"] is None:
        said = "result, error flag unknown"
    return f"MCP {where}: {said} {_duration(execution['duration_ms'])}"


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
    passed: dict[str, int] = {}
    for e in report.get("pass_through", ()):
        what = f"{e['method']} {e['path']}"
        passed[what] = passed.get(what, 0) + 1
    if passed:
        listed = ", ".join(f"{what}" + (f" ({n}x)" if n > 1 else "") for what, n in passed.items())
        lines += ["", f"passed through unaudited, in no session (not model traffic): {listed}"]
    lines += ["", "? = unknown (not reported or not seen)"]
    if _any_summed(report):
        lines.append(
            f"{SUMMED} = total summed by modeltap from the counts the provider reported "
            "(input, cache read, cache write, output): its API reports no total"
        )
    # Models, tool names, session ids and paths come from the wire.
    return "\n".join(printable(line) for line in lines) + "\n"


def _any_summed(report: Json) -> bool:
    return any(
        turn["token_usage"].get("total_summed")
        for session in report["sessions"]
        for turn in session["turns"]
    )
