"""Where each span hangs: session roots, the client's trace, and the spans still open.

Why a session root span, with a trace id derived from the session: Jaeger
names a trace after its root and draws the waterfall from it, so a trace made
of sibling root spans reads badly and a trace whose spans all point at a parent
that never arrives is flagged as broken. A real root, ``session {id}``, starts
with the session's first exchange and ends when the session ends (or at
shutdown, stamped with the end of the session's last span, so it never
stretches to the exit time). Its trace id is
:func:`~modeltap.telemetry.export.session_trace_id`, so several proxy processes
sharing a run id put one session in one trace. The cost is that the root span
is exported when the session ends: until then Jaeger shows the exchanges
without their parent.

When the client sends ``traceparent``, a span becomes a child of that remote
context instead, so it sits in the agent's own trace; no session root is made
for it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from modeltap.telemetry.attributes import MODELTAP_RUN_ID, MODELTAP_SESSION_ID
from modeltap.telemetry.export import SessionIdGenerator, session_trace_id_int

__all__ = ["SessionRoot", "SpanTree", "never_raises"]

_logger = logging.getLogger("modeltap.telemetry")


def never_raises[**P](func: Callable[P, None]) -> Callable[P, None]:
    """Make a telemetry entry point log and swallow its own failures.

    A span is never worth an exchange: the addon calls these methods on the
    traffic path, so a bug here must cost a span, not a request.
    """

    @functools.wraps(func)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            func(*args, **kwargs)
        except Exception:
            _logger.exception("telemetry: %s failed; the span may be incomplete", func.__name__)

    return guarded


def _parent_from_traceparent(traceparent: str | None) -> Context | None:
    """The remote context a ``traceparent`` header names, or ``None`` if absent/invalid."""
    if not traceparent:
        return None
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


# --------------------------------------------------------------------------
# Where spans hang


@dataclass(slots=True)
class SessionRoot:
    """A session's root span, open until the session ends."""

    span: trace.Span
    context: Context
    last_end_ns: int
    ended: bool = False


class _Open(Protocol):
    """A span the tree keeps track of until it ends."""

    end_ns: int | None

    def _interrupt(self, end_ns: int) -> None: ...


class SpanTree:
    """Where each span of a run hangs, and which spans are still open.

    Args:
        tracer: the run's tracer; ``None`` makes every span a no-op.
        ids: the id generator the tracer uses; a session root forces its
            trace id through it.
        run_id: the run's id, part of each session's trace id.
        capture_content: whether prompts and outputs go into spans.
    """

    def __init__(
        self,
        tracer: trace.Tracer | None,
        ids: SessionIdGenerator,
        *,
        run_id: str,
        capture_content: bool,
    ) -> None:
        self.tracer = tracer
        self.run_id = run_id
        self.capture_content = capture_content
        self._ids = ids
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionRoot] = {}
        self._open: dict[int, _Open] = {}

    def start_span(
        self,
        name: str,
        *,
        session_id: str,
        traceparent: str | None,
        parent: trace.Span | None,
        start_ns: int,
        attributes: dict[str, str | int],
    ) -> tuple[trace.Span, SessionRoot | None]:
        """Start a CLIENT span under ``parent``, else the client's trace, else the session root.

        Returns:
            The span, and the session root it hangs under (``None`` when it
            hangs elsewhere).
        """
        assert self.tracer is not None
        root: SessionRoot | None = None
        if parent is not None:
            context = trace.set_span_in_context(parent)
        else:
            context, root = self._parent(session_id, traceparent, start_ns)
        span = self.tracer.start_span(
            name, context=context, kind=SpanKind.CLIENT, attributes=attributes, start_time=start_ns
        )
        return span, root

    def _session_root(self, session_id: str, start_ns: int) -> SessionRoot:
        assert self.tracer is not None
        with self._lock:
            root = self._sessions.get(session_id)
            if root is not None:
                return root
            token = self._ids.forced_trace_id.set(session_trace_id_int(self.run_id, session_id))
            try:
                span = self.tracer.start_span(
                    f"session {session_id}",
                    context=Context(),
                    kind=SpanKind.INTERNAL,
                    attributes={MODELTAP_SESSION_ID: session_id, MODELTAP_RUN_ID: self.run_id}
                    if self.run_id
                    else {MODELTAP_SESSION_ID: session_id},
                    start_time=start_ns,
                )
            finally:
                self._ids.forced_trace_id.reset(token)
            root = SessionRoot(span, trace.set_span_in_context(span), start_ns)
            self._sessions[session_id] = root
            return root

    def _parent(
        self, session_id: str, traceparent: str | None, start_ns: int
    ) -> tuple[Context, SessionRoot | None]:
        remote = _parent_from_traceparent(traceparent)
        if remote is not None:
            return remote, None
        root = self._session_root(session_id, start_ns)
        return root.context, root

    def track(self, span: _Open) -> None:
        """Keep ``span`` until it ends, so shutdown can end it if it never does."""
        with self._lock:
            self._open[id(span)] = span

    def untrack(self, span: _Open, root: SessionRoot | None) -> None:
        """``span`` ended: forget it, and move its session root's end past it."""
        with self._lock:
            self._open.pop(id(span), None)
            if root is not None:
                root.last_end_ns = max(root.last_end_ns, span.end_ns or 0)

    def end_session(self, session_id: str, end_ns: int | None) -> None:
        """End a session's root span (see :meth:`~modeltap.telemetry.Telemetry.end_session`)."""
        with self._lock:
            root = self._sessions.get(session_id)
            if root is None or root.ended:
                return
            root.ended = True
            # Forget it: memory stays bounded over many sessions. A late
            # exchange of this session starts a new root in the same trace.
            del self._sessions[session_id]
            root.span.end(end_time=end_ns if end_ns is not None else root.last_end_ns)

    def stop(self, end_ns: int) -> None:
        """End what is still open and make every later span a no-op.

        Open spans end at ``end_ns`` marked ``modeltap.interrupted``; session
        roots end at their last span's end.
        """
        self._end_leftovers(end_ns)
        self.tracer = None

    @never_raises
    def _end_leftovers(self, end_ns: int) -> None:
        with self._lock:
            leftovers = list(self._open.values())
        for span in leftovers:
            span._interrupt(end_ns)
        with self._lock:
            roots = [root for root in self._sessions.values() if not root.ended]
            for root in roots:
                root.ended = True
                root.span.end(end_time=root.last_end_ns)
