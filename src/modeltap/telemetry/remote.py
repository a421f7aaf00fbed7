"""Experimental (issue 29): spans, metrics and log records built in a child process.

Set ``MODELTAP_TELEMETRY_PROCESS=1`` and :meth:`Telemetry.configure` returns a
:class:`RemoteTelemetry`: the proxy keeps only the calls the spans addon and the
sink make (their arguments are the facts: records, times, outcomes), appends
them to a list, and a writer thread sends the list every few milliseconds,
pickled, to a child process (``python -m modeltap.telemetry.remote``) that
replays them against a real :class:`Telemetry`: the same tree, conventions,
trace ids, links and exporters, with the SDK's work off the proxy's event loop
and GIL. Nothing in the proxy waits for the child: past :data:`MAX_PENDING`
facts not yet sent, new ones are dropped and counted (and reported at exit).
The child sends its counts back after each batch and its exit summary at
shutdown.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any, Final, cast

from modeltap.evidence.sink import LineObserver
from modeltap.telemetry import Telemetry
from modeltap.telemetry.export import SpanStats
from modeltap.telemetry.logs import LogStats
from modeltap.telemetry.mcp import McpSpans
from modeltap.telemetry.spans import ConnectionSpan, ExchangeSpan

__all__ = ["EXPORTER_PROCESS_ENV", "MAX_PENDING", "RemoteTelemetry", "telemetry_class"]

#: Set to ``1`` to build and export spans, metrics and log records in a child
#: process (experimental, off by default).
EXPORTER_PROCESS_ENV: Final = "MODELTAP_TELEMETRY_PROCESS"

_logger = logging.getLogger("modeltap.telemetry")

#: Facts kept for the child before new ones are dropped.
MAX_PENDING: Final = 100_000
#: How often the writer thread sends what accumulated (seconds).
FLUSH_INTERVAL_S: Final = 0.02
_HEADER = struct.Struct("!I")
#: Span-ending calls: a dropped one is a span that will not be exported.
_ENDS_SPAN: Final = frozenset({"finish"})


def _write_frame(out: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def _read_frame(inp: IO[bytes]) -> Any:
    head = inp.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    data = inp.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


class _Handle:
    """A span in the child: every method call becomes a fact."""

    __slots__ = ("_put", "hid")

    def __init__(self, put: Callable[[tuple[object, ...]], None], hid: int) -> None:
        self._put = put
        self.hid = hid

    def __getattr__(self, name: str) -> Callable[..., None]:
        put, hid = self._put, self.hid

        def call(*args: object, **kwargs: object) -> None:
            put(("m", hid, name, args, kwargs))

        return call


class _McpCalls:
    """The MCP spans in the child: every method call becomes a fact."""

    def __init__(self, put: Callable[[tuple[object, ...]], None]) -> None:
        self._put = put

    def __getattr__(self, name: str) -> Callable[..., None]:
        put = self._put

        def call(*args: object, **kwargs: object) -> None:
            put(("mcp", name, args, kwargs))

        return call


def telemetry_class(environ: Mapping[str, str] | None = None) -> type[Telemetry]:
    """:class:`RemoteTelemetry` when ``MODELTAP_TELEMETRY_PROCESS=1``, else :class:`Telemetry`."""
    env = os.environ if environ is None else environ
    return RemoteTelemetry if env.get(EXPORTER_PROCESS_ENV) == "1" else Telemetry


class RemoteTelemetry(Telemetry):
    """:class:`Telemetry`'s interface; the work happens in a child process.

    Build it with ``RemoteTelemetry.configure`` (the same arguments): without any
    endpoint it returns a plain, no-op :class:`Telemetry` and starts no process.
    """

    @classmethod
    def _from_settings(cls, settings: Mapping[str, object]) -> Telemetry:
        if any(settings.get(k) is not None for k in ("target", "metrics_target", "logs_target")):
            return cls(settings)
        return Telemetry(**settings)  # type: ignore[arg-type]

    def __init__(self, settings: Mapping[str, object]) -> None:
        # Deliberately not Telemetry.__init__: no SDK object lives in the proxy.
        self.target = cast(Any, settings.get("target"))
        self.metrics_target = cast(Any, settings.get("metrics_target"))
        self.logs_target = cast(Any, settings.get("logs_target"))
        self.capture_content = bool(settings.get("capture_content"))
        self.run_id = str(settings.get("run_id", ""))
        self._shutdown_timeout = float(cast(float, settings.get("shutdown_timeout", 5.0)))
        self._summary: str | None = None
        self._pending: list[tuple[object, ...]] = []
        self._dropped_facts = 0
        self._dropped_spans = 0
        self._dropped_lines = 0
        self._next_id = 0
        self._span_stats = SpanStats(0, 0, 0)
        self._log_stats: LogStats | None = None
        self._final: threading.Event = threading.Event()
        self._dead = False
        self._stop = threading.Event()
        self.mcp = cast(McpSpans, _McpCalls(self._put))
        env = dict(os.environ)
        env.pop(EXPORTER_PROCESS_ENV, None)
        self._child = subprocess.Popen(
            [sys.executable, "-m", "modeltap.telemetry.remote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self._child.stdin is not None and self._child.stdout is not None
        self._to_child: IO[bytes] = self._child.stdin
        self._from_child: IO[bytes] = self._child.stdout
        _write_frame(self._to_child, settings)
        self._writer = threading.Thread(
            target=self._write_loop, name="modeltap-telemetry-writer", daemon=True
        )
        self._reader = threading.Thread(
            target=self._read_loop, name="modeltap-telemetry-reader", daemon=True
        )
        self._writer.start()
        self._reader.start()

    # ------------------------------------------------------------------ facts out

    def _put(self, fact: tuple[object, ...]) -> None:
        if self._summary is not None or len(self._pending) >= MAX_PENDING or self._dead:
            self._drop(fact)
            return
        self._pending.append(fact)

    def _drop(self, fact: tuple[object, ...]) -> None:
        """Count a fact the child will not see: a span's end is a dropped span, a
        line a dropped log record (the child adds both to its exit summary)."""
        self._dropped_facts += 1
        if fact[0] == "m" and fact[2] in _ENDS_SPAN:
            self._dropped_spans += 1
        elif fact[0] == "line":
            self._dropped_lines += 1

    def _send_pending(self) -> None:
        batch, self._pending = self._pending, []
        if batch and not self._dead:
            try:
                _write_frame(self._to_child, ("batch", batch))
            except (OSError, ValueError):
                self._dead = True
                for fact in batch:
                    self._drop(fact)

    def _write_loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self._send_pending()

    def _read_loop(self) -> None:
        while True:
            try:
                frame = _read_frame(self._from_child)
            except (OSError, ValueError, pickle.UnpicklingError):
                frame = None
            if frame is None:
                self._dead = True
                self._final.set()
                return
            kind, span_stats, log_stats, summary = frame
            self._span_stats = SpanStats(*span_stats)
            self._log_stats = LogStats(*log_stats) if log_stats is not None else None
            if kind == "summary":
                self._final_summary = cast(str, summary)
                self._final.set()
                return

    # ------------------------------------------------------------------ interface

    @property
    def enabled(self) -> bool:
        return self._summary is None

    @property
    def line_observer(self) -> LineObserver | None:
        if self.logs_target is None:
            return None
        put = self._put

        def observe(file: str, line: bytes, record: object) -> None:
            put(("line", file, line, record))

        return observe

    def logs_dropped(self) -> int | None:
        if self.logs_target is None:
            return None
        stats = self._log_stats
        return (stats.dropped if stats is not None else 0) + self._dropped_facts

    def log_stats(self) -> LogStats | None:
        return self._log_stats

    def stats(self) -> SpanStats:
        return self._span_stats

    def start_exchange(
        self, *, parent: ConnectionSpan | None = None, **kwargs: object
    ) -> ExchangeSpan:
        self._next_id += 1
        hid = self._next_id
        if parent is not None:
            kwargs["parent"] = cast(_Handle, parent).hid
        self._put(("x", hid, kwargs))
        return cast(ExchangeSpan, _Handle(self._put, hid))

    def start_connection(self, **kwargs: object) -> ConnectionSpan:
        self._next_id += 1
        hid = self._next_id
        self._put(("c", hid, kwargs))
        return cast(ConnectionSpan, _Handle(self._put, hid))

    def end_session(self, session_id: str, *, end_ns: int | None = None) -> None:
        self._put(("end", session_id, end_ns))

    def shutdown(self, *, end_ns: int | None = None) -> str:
        if self._summary is not None:
            return self._summary
        end = end_ns if end_ns is not None else time.time_ns()
        self._stop.set()
        self._writer.join(self._shutdown_timeout)
        self._send_pending()
        summary = "spans: the exporter process ended before its summary"
        if not self._dead:
            try:
                _write_frame(
                    self._to_child, ("shutdown", end, self._dropped_spans, self._dropped_lines)
                )
                self._to_child.close()
            except (OSError, ValueError):
                self._dead = True
        if self._final.wait(self._shutdown_timeout + 3.0):
            summary = getattr(self, "_final_summary", summary)
        try:
            self._child.wait(2.0)
        except subprocess.TimeoutExpired:
            self._child.kill()
        if self._dead and self._dropped_facts:
            summary += (
                f"\nexporter process: {self._dropped_facts} facts lost with it "
                f"({self._dropped_spans} spans, {self._dropped_lines} lines)"
            )
        self._summary = summary
        return summary


# ---------------------------------------------------------------------- child


def _counts(telemetry: Telemetry) -> tuple[tuple[int, int, int], tuple[int, ...] | None]:
    s = telemetry.stats()
    logs = telemetry.log_stats()
    log_counts = (
        (logs.written, logs.exported, logs.failed, logs.queue_full, logs.unanswered)
        if logs is not None
        else None
    )
    return (s.ended, s.exported, s.failed), log_counts


def _replay(
    telemetry: Telemetry,
    spans: dict[int, ExchangeSpan | ConnectionSpan],
    observe: LineObserver | None,
    fact: tuple[Any, ...],
) -> None:
    kind = fact[0]
    if kind == "line":
        if observe is not None:
            observe(fact[1], fact[2], fact[3])
    elif kind == "m":
        _, hid, name, args, kwargs = fact
        span = spans.get(hid)
        if span is not None:
            getattr(span, name)(*args, **kwargs)
            if name == "finish":
                del spans[hid]
    elif kind == "x":
        _, hid, kwargs = fact
        parent = kwargs.get("parent")
        if parent is not None:
            kwargs["parent"] = spans.get(parent)
        spans[hid] = telemetry.start_exchange(**kwargs)
    elif kind == "c":
        _, hid, kwargs = fact
        spans[hid] = telemetry.start_connection(**kwargs)
    elif kind == "mcp":
        _, name, args, kwargs = fact
        getattr(telemetry.mcp, name)(*args, **kwargs)
    elif kind == "end":
        telemetry.end_session(fact[1], end_ns=fact[2])


def main() -> None:
    """The child: replay the proxy's facts against a real :class:`Telemetry`."""
    inp = sys.stdin.buffer
    # The frames go to a copy of fd 1; fd 1 itself then points at stderr, so
    # nothing else (a stray print in a library) can write into the frames' pipe.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    settings = _read_frame(inp)
    if settings is None:
        return
    telemetry = Telemetry(**settings)
    observe = telemetry.line_observer
    spans: dict[int, ExchangeSpan | ConnectionSpan] = {}
    end_ns: int | None = None
    while True:
        frame = _read_frame(inp)
        if frame is None:
            break
        if frame[0] == "shutdown":
            _, end_ns, lost_spans, lost_lines = frame
            telemetry.lost(spans=lost_spans, lines=lost_lines)
            break
        for fact in frame[1]:
            try:
                _replay(telemetry, spans, observe, fact)
            except Exception:  # one bad fact must not stop the export
                _logger.exception("modeltap telemetry: a fact could not be replayed")
        span_counts, log_counts = _counts(telemetry)
        _write_frame(out, ("stats", span_counts, log_counts, None))
    summary = telemetry.shutdown(end_ns=end_ns)
    span_counts, log_counts = _counts(telemetry)
    _write_frame(out, ("summary", span_counts, log_counts, summary))
    out.close()


if __name__ == "__main__":
    main()
