"""The bench's table: one row per figure, its reference, the ratio and the goal beside it."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cases import Plan, Results
from bench.wires import Wire

README = Path(__file__).resolve().parent / "README.md"

#: The telemetry set-ups: name -> what the label says.
TELEMETRY = {
    "otlp-http": "OTLP/HTTP export",
    "otlp-grpc": "OTLP/gRPC export",
    "slow-http": "slow collector (OTLP/HTTP, answers after 2 s)",
    "slow-grpc": "slow collector (OTLP/gRPC, answers after 2 s)",
    "dead-http": "dead collector (OTLP/HTTP, connection refused)",
    "dead-grpc": "dead collector (OTLP/gRPC, connection refused)",
}
#: One signal at a time (OTLP/HTTP, the others off): what each one costs.
SIGNALS = {
    "spans-http": ("spans only", {"OTEL_LOGS_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}),
    "metrics-http": (
        "metrics only",
        {"OTEL_LOGS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none"},
    ),
    "logs-http": (
        "log records only",
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
    ),
}


@dataclass(frozen=True)
class Goal:
    """``kind`` ``ratio`` (value / reference), ``value`` (absolute) or ``diff``
    (value - reference); met when ``op`` ``limit`` holds."""

    kind: str
    op: str
    limit: float

    def text(self) -> str:
        sign = "≤" if self.op == "<=" else ("≥" if self.op == ">=" else "<")
        if self.kind == "ratio":
            return f"{sign} {self.limit:g}x"
        if self.kind == "diff":
            return f"{sign} +{self.limit:g}"
        return f"{sign} {self.limit:g}"

    def met(self, value: float) -> bool:
        if self.op == "<=":
            return value <= self.limit
        if self.op == ">=":
            return value >= self.limit
        return value < self.limit


@dataclass(frozen=True)
class Row:
    label: str
    metric: str
    target: str = "modeltap"
    ref: str | None = "mitmdump"
    digits: int = 2
    goal: Goal | None = None


def le(limit: float, kind: str = "ratio") -> Goal:
    return Goal(kind, "<=", limit)


REF_LABEL = {
    "mitmdump-stream": "streaming mitmdump",
    "mitmdump": "mitmdump",
    "modeltap": "no export",
}


def rows(wires: list[Wire], families: set[str]) -> list[tuple[str, list[Row]]]:
    """The table's sections and rows, for the wires and case families measured."""
    out: list[tuple[str, list[Row]]] = []
    if "small" in families:
        small: list[Row] = []
        for w in wires:
            unit = "response.create → completed" if w.transport == "websocket" else "2 KB request"
            small += [
                Row(f"{w.name} {unit}, c=1: p50 (ms)", f"{w.name}.c1_p50", goal=le(1.10)),
                Row(
                    f"{w.name} {unit}, c=1: p99 (ms)",
                    f"{w.name}.c1_p99",
                    goal=le(1.0) if w.name == "chat" else None,
                ),
                Row(
                    f"{w.name} {unit}, c=1: proxy CPU per request (µs)",
                    f"{w.name}.c1_cpu_us",
                    digits=0,
                ),
            ]
        small += [
            Row("chat 2 KB, c=16: p50 (ms)", "chat.c16_p50", goal=le(1.10)),
            Row("chat 2 KB, c=16: p99 (ms)", "chat.c16_p99"),
            Row(
                "chat 2 KB, c=16: requests/s",
                "chat.c16_rps",
                digits=0,
                goal=Goal("ratio", ">=", 0.90),
            ),
            Row(
                "chat 2 KB, c=16: proxy CPU per request (µs)",
                "chat.c16_cpu_us",
                digits=0,
            ),
        ]
        out.append(("small requests, every wire", small))
    if "telemetry" in families:
        tel: list[Row] = []
        for name in ("otlp-http", "otlp-grpc"):
            what = TELEMETRY[name]
            tel += [
                Row(f"{what}: chat c=1 p50 (ms)", "chat.c1_p50", name, goal=le(1.05)),
                Row(
                    f"{what}: chat c=1 proxy CPU per request (µs)",
                    "chat.c1_cpu_us",
                    name,
                    digits=0,
                    goal=le(1.0),
                ),
                Row(f"{what}: chat c=16 p50 (ms)", "chat.c16_p50", name, goal=le(1.05)),
                Row(f"{what}: chat c=16 requests/s", "chat.c16_rps", name, digits=0),
                Row(
                    f"{what}: chat c=16 proxy CPU per request (µs)",
                    "chat.c16_cpu_us",
                    name,
                    digits=0,
                    goal=le(1.0),
                ),
            ]
        for name in ("slow-http", "slow-grpc", "dead-http", "dead-grpc"):
            healthy = "otlp-" + name.split("-")[1]
            what = TELEMETRY[name]
            tel += [
                Row(
                    f"{what}: chat c=1 p50 (ms), vs a healthy one",
                    "chat.c1_p50",
                    name,
                    healthy,
                    goal=le(1.05),
                ),
                Row(
                    f"{what}: chat c=16 p50 (ms), vs a healthy one",
                    "chat.c16_p50",
                    name,
                    healthy,
                    goal=le(1.05),
                ),
            ]
        for name, (what, _) in SIGNALS.items():
            tel.append(
                Row(
                    f"{what} (OTLP/HTTP): chat c=16 proxy CPU per request (µs), vs no export",
                    "chat.c16_cpu_us",
                    name,
                    "modeltap",
                    digits=0,
                )
            )
        out.append(("telemetry on: spans, metrics and log records exported", tel))
    if "streams" in families:
        st: list[Row] = []
        for w in wires:
            if w.transport == "http":
                st.append(
                    Row(
                        f"{w.name} stream: first event p50 (ms)",
                        f"{w.name}.first_p50",
                        ref="mitmdump-stream",
                        goal=le(2.0, "diff"),
                    )
                )
        for w in wires:
            what = (
                "WebSocket response of N messages"
                if w.transport == "websocket"
                else "stream of N events"
            )
            st += [
                Row(
                    f"{w.name} {what}: time to last byte (ms)",
                    f"{w.name}.long_ttlb_ms",
                    ref="mitmdump-stream",
                    digits=0,
                    goal=le(1.05),
                ),
                Row(
                    f"{w.name} {what}: proxy CPU per event (µs)",
                    f"{w.name}.long_cpu_us",
                    ref="mitmdump-stream",
                    digits=1,
                    goal=le(1.0),
                ),
                Row(
                    f"{w.name} {what}: p99 gap between events (ms)",
                    f"{w.name}.long_gap_p99_ms",
                    ref="mitmdump-stream",
                    goal=le(1.0),
                ),
            ]
        out.append(("streams (the reference streams the same responses: bench/mitm_stream.py)", st))
    if "bodies" in families:
        out.append(
            (
                "big bodies",
                [
                    Row("5 MB image body: p50 (ms)", "large5.p50", digits=1, goal=le(1.25)),
                    Row(
                        "5 MB image body: proxy peak RSS (MB)",
                        "large5.peak_mb",
                        digits=1,
                        goal=le(1.0),
                    ),
                    Row("5 MB image body: peak RSS above idle (MB)", "large5.growth_mb", digits=1),
                    Row("20 MB image body: p50 (ms)", "large20.p50", digits=1, goal=le(1.0)),
                    Row(
                        "20 MB image body: proxy peak RSS (MB)",
                        "large20.peak_mb",
                        digits=1,
                        goal=le(1.0),
                    ),
                    Row(
                        "20 MB image body: peak RSS above idle (MB)", "large20.growth_mb", digits=1
                    ),
                    Row(
                        "200 KB agent turn (tool results), c=1: p50 (ms)",
                        "agent.c1_p50",
                        goal=le(1.0),
                    ),
                    Row("200 KB agent turn, c=1: p99 (ms)", "agent.c1_p99"),
                    Row(
                        "200 KB agent turn, c=1: proxy CPU per request (µs)",
                        "agent.c1_cpu_us",
                        digits=0,
                    ),
                ],
            )
        )
    if "ws" in families:
        out.append(
            (
                "WebSocket session memory",
                [
                    Row("WebSocket session of N messages: wall time (s)", "ws_session.s", digits=1),
                    Row(
                        "WebSocket session: proxy RSS at the end (MB)",
                        "ws_session.rss_end_mb",
                        digits=1,
                    ),
                    Row(
                        "WebSocket session: RSS growth after the first 4,000 messages (MB)",
                        "ws_session.growth_mb",
                        digits=1,
                        goal=Goal("value", "<", 5.0),
                    ),
                ],
            )
        )
    if "mcp" in families:
        from bench.mcp_call import rows as mcp_rows  # it imports this module

        out.append(mcp_rows())
    if "startup" in families:
        out.append(
            (
                "start-up",
                [
                    Row(
                        "`modeltap run` to accepting connections (s)",
                        "startup.listen_s",
                        goal=le(0.5, "value"),
                    ),
                    Row(
                        "pytest `modeltap` fixture, per test (s)",
                        "fixture.per_test_s",
                        ref=None,
                        digits=3,
                        goal=le(0.5, "value"),
                    ),
                    Row(
                        "pytest `modeltap` fixture, first test of a session (s)",
                        "fixture.first_s",
                        ref=None,
                        digits=3,
                    ),
                ],
            )
        )
    return out


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def twin(name: str, of: str) -> str:
    """The candidate's counterpart of a modeltap target (``otlp-http`` becomes
    ``candidate otlp-http``)."""
    if name in ("mitmdump", "mitmdump-stream", "direct"):
        return name
    return "candidate" if name == "modeltap" else f"{of} {name}"


def judge(row: Row, v: float | None, rf: float | None) -> tuple[str, str]:
    """The ratio cell and the status of one figure against its reference and goal."""
    if row.goal is None or v is None:
        return ("-" if rf is None or v is None else fmt(v / rf if rf else None), "-")
    g = row.goal
    if g.kind == "value":
        x: float | None = v
    elif rf is None:
        return ("-", "n/a")
    else:
        x = v - rf if g.kind == "diff" else (v / rf if rf else None)
    ratio = fmt(v / rf) if rf else "-"
    if g.kind == "diff" and x is not None:
        ratio = f"{ratio} ({x:+.2f} ms)"
    return ratio, ("n/a" if x is None else ("met" if g.met(x) else "**not met**"))


def table(r: Results, plan: Plan, wires: list[Wire], families: set[str]) -> tuple[str, list[str]]:
    """The markdown table, and the labels of goals not met."""
    cand = any(name.startswith("candidate") for name in r.values)
    head = ["case", "direct", "reference", "modeltap", "ratio", "goal", "status"]
    if cand:
        head += ["candidate", "cand. ratio", "cand. status"]
    lines = [
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * 4 + "---|---|" + ("---:|---:|---|" if cand else ""),
    ]
    missed: list[str] = []
    for section, section_rows in rows(wires, families):
        lines.append(f"| **{section}** |" + " |" * (len(head) - 1))
        for row in section_rows:
            label = row.label.replace("N events", f"{plan.long_events:,} events").replace(
                "N messages", f"{plan.ws_long_messages:,} messages"
            )
            if "session of" in label:
                label = label.replace(
                    f"{plan.ws_long_messages:,} messages", f"{4 * plan.ws_session:,} messages"
                )
            value = r.get(row.target, row.metric)
            if value is None and not cand:
                continue
            ref = r.get(row.ref, row.metric) if row.ref else None
            direct = r.get("direct", row.metric) if row.target == "modeltap" else None
            ref_cell = (
                f"{fmt(ref, row.digits)} ({REF_LABEL.get(row.ref or '', row.ref)})"
                if row.ref
                else "-"
            )

            ratio, status = judge(row, value, ref)
            if status == "**not met**":
                missed.append(label)
            cells = [
                label,
                fmt(direct, row.digits),
                ref_cell,
                fmt(value, row.digits),
                ratio,
                row.goal.text() if row.goal else "-",
                status,
            ]
            if cand:
                cv = r.get(twin(row.target, "candidate"), row.metric)
                cref = r.get(twin(row.ref, "candidate"), row.metric) if row.ref else None
                cratio, cstatus = judge(row, cv, cref)
                cells += [fmt(cv, row.digits), cratio, cstatus]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), missed


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import version

    return (
        f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {platform.python_version()}, mitmproxy {version('mitmproxy')}, "
        f"aiohttp {version('aiohttp')} upstream, websockets {version('websockets')}"
    )


def report(
    r: Results,
    plan: Plan,
    wires: list[Wire],
    families: set[str],
    elapsed: float,
    checks: list[str],
    load: str,
    skipped: list[str],
) -> tuple[str, list[str]]:
    body, missed = table(r, plan, wires, families)
    parts = [
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {plan.rounds} rounds, "
        f"{elapsed:.0f} s. {machine()}. Load average (1 min) {load}: other work on the "
        "machine shows in the absolute figures more than in the ratios.",
        "",
    ]
    if skipped:
        parts += [
            "Wires not measured (the measured modeltap does not audit them yet): "
            f"{', '.join(skipped)}.",
            "",
        ]
    parts += [body, ""]
    errors = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "none"
    parts.append(f"Non-200 answers: {errors}. " + " ".join(checks))
    if r.problems:
        parts.append("")
        parts.append("Problems: " + "; ".join(sorted(set(r.problems))))
    return "\n".join(parts), missed


def update_readme(text: str) -> None:
    start, end = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
    readme = README.read_text()
    if start not in readme or end not in readme:
        raise SystemExit(f"{README} has no {start} ... {end} block")
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    README.write_text(f"{head}{start}\n{text}\n{end}{tail}")
