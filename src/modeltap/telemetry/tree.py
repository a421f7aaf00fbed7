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

The tree also keeps each session's tool calls that await their result: a call
the model asked for (a response's ``tool_calls``) becomes an ``execute_tool``
span once a later request of the session carries its result (paired as the
evidence pairs it, :mod:`modeltap.evidence.pairing`: by id, or by position for
Gemini's calls without one), from the end of
the response that asked to the arrival of that request (the agent's own time
running the tool), beside the exchanges in the waterfall; when an MCP
``tools/call`` ran it, the span links to that call's span
(:attr:`SpanTree.tool_links`). A call never answered ends with its session,
``modeltap.tool.result_seen`` false. At most :data:`MAX_PENDING_TOOLS` calls
wait per session, so memory stays bounded.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from modeltap.apis.message_parts import json_value
from modeltap.evidence.coverage import qualified_tool_name
from modeltap.evidence.pairing import ToolPairing
from modeltap.evidence.records import ToolCall, ToolResult
from modeltap.telemetry import conventions as names
from modeltap.telemetry.attributes import Attributes, content_values, tool_attributes
from modeltap.telemetry.export import SessionIdGenerator, session_trace_id_int
from modeltap.telemetry.metrics import MetricExport

__all__ = ["LINKS_KEPT", "MAX_PENDING_TOOLS", "SessionRoot", "SpanTree", "never_raises"]

#: Tool calls one session may have waiting for their result; more are not drawn.
MAX_PENDING_TOOLS = 1024

_logger = logging.getLogger("modeltap.telemetry")

#: Exchange spans whose context is kept by ``seq`` for the log records of their
#: lines (:meth:`SpanTree.link_for`); the oldest is forgotten first. A line
#: written more than this many audited exchanges after its own is not linked.
LINKS_KEPT: Final = 65_536


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


@dataclass(slots=True)
class _AskedTool:
    """A tool call awaiting its result: where and when its span starts."""

    call: ToolCall
    asked_ns: int
    context: Context
    root: SessionRoot | None


@dataclass(slots=True)
class _SessionTools:
    """One session's tool calls awaiting results, and when its last span ended."""

    pending: ToolPairing[_AskedTool]
    last_end_ns: int


class SpanTree:
    """Where each span of a run hangs, and which spans are still open.

    Args:
        tracer: the run's tracer; ``None`` makes every span a no-op.
        ids: the id generator the tracer uses; a session root forces its
            trace id through it.
        run_id: the run's id, part of each session's trace id.
        capture_content: whether prompts and outputs go into spans.
        metrics: the run's metrics, or ``None`` when they are not exported.
    """

    def __init__(
        self,
        tracer: trace.Tracer | None,
        ids: SessionIdGenerator,
        *,
        run_id: str,
        capture_content: bool,
        metrics: MetricExport | None = None,
    ) -> None:
        self.tracer = tracer
        self.metrics = metrics
        self.run_id = run_id
        self.capture_content = capture_content
        self._ids = ids
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionRoot] = {}
        self._open: dict[int, _Open] = {}
        self._tools: dict[str, _SessionTools] = {}
        #: Exchange span contexts by the ``seq`` of their audit record.
        self._links: OrderedDict[int, trace.SpanContext] = OrderedDict()
        #: Called with ``(seq, span context)`` when an exchange span learns its
        #: ``seq`` (the log records waiting for that link go out then).
        self.on_link: Callable[[int, trace.SpanContext], None] | None = None
        #: Called with ``(session id, call)`` as a call's ``execute_tool`` span is
        #: drawn: the links it carries (the MCP span that ran it, telemetry/mcp.py).
        self.tool_links: Callable[[str, ToolCall], Sequence[trace.Link]] | None = None

    def start_span(
        self,
        name: str,
        *,
        session_id: str,
        traceparent: str | None,
        parent: trace.Span | None,
        start_ns: int,
        attributes: Attributes,
    ) -> tuple[trace.Span, SessionRoot | None, Context]:
        """Start a CLIENT span under ``parent``, else the client's trace, else the session root.

        Returns:
            The span, the session root it hangs under (``None`` when it hangs
            elsewhere), and the context it hangs in (its tool calls' spans
            hang there too).
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
        return span, root, context

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
                    attributes={
                        names.MODELTAP_SESSION_ID: session_id,
                        names.MODELTAP_RUN_ID: self.run_id,
                    }
                    if self.run_id
                    else {names.MODELTAP_SESSION_ID: session_id},
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

    def link(self, seq: int, context: trace.SpanContext) -> None:
        """An exchange span was named after the audit record ``seq``: remember its context."""
        with self._lock:
            self._links[seq] = context
            if len(self._links) > LINKS_KEPT:
                self._links.popitem(last=False)
        on_link = self.on_link
        if on_link is not None:
            on_link(seq, context)

    def exchange_link(self, seq: int) -> trace.SpanContext | None:
        """The context of the exchange span named after audit record ``seq``, if known."""
        with self._lock:
            return self._links.get(seq)

    def link_for(self, seq: int | None, session_id: str) -> trace.SpanContext | None:
        """The span a JSONL line belongs to: its exchange's span (by ``seq``), else its
        session's root span while that is open; ``None`` when neither is known."""
        with self._lock:
            if seq is not None:
                context = self._links.get(seq)
                if context is not None:
                    return context
            root = self._sessions.get(session_id)
            if root is None or root.ended:
                return None
            return root.span.get_span_context()

    def track(self, span: _Open) -> None:
        """Keep ``span`` until it ends, so shutdown can end it if it never does."""
        with self._lock:
            self._open[id(span)] = span

    def untrack(self, span: _Open, root: SessionRoot | None, session_id: str | None = None) -> None:
        """``span`` ended: forget it, and move its session's (and root's) end past it."""
        end_ns = span.end_ns or 0
        with self._lock:
            self._open.pop(id(span), None)
            if root is not None:
                root.last_end_ns = max(root.last_end_ns, end_ns)
            tools = self._tools.get(session_id) if session_id is not None else None
            if tools is not None:
                tools.last_end_ns = max(tools.last_end_ns, end_ns)

    # ------------------------------------------------------------------ tool calls

    def tools_asked(
        self,
        session_id: str,
        calls: tuple[ToolCall, ...],
        *,
        asked_ns: int,
        context: Context,
        root: SessionRoot | None,
    ) -> None:
        """A response that ended at ``asked_ns`` asked for ``calls``: await their results."""
        with self._lock:
            tools = self._tools.setdefault(session_id, _SessionTools(ToolPairing(), asked_ns))
            tools.last_end_ns = max(tools.last_end_ns, asked_ns)
            for call in calls:
                if len(tools.pending) >= MAX_PENDING_TOOLS:
                    break
                tools.pending.asked(call.call_id, _AskedTool(call, asked_ns, context, root))

    def tools_answered(
        self, session_id: str, results: tuple[ToolResult, ...], arrived_ns: int
    ) -> None:
        """A request that arrived at ``arrived_ns`` carries ``results``: draw their tools' spans."""
        with self._lock:
            tools = self._tools.get(session_id)
            if tools is None:
                return
            answered = tools.pending.answer(results)
        for asked, size in answered:
            self._tool_span(session_id, asked, max(asked.asked_ns, arrived_ns), True, size)

    def _tool_span(
        self,
        session_id: str,
        asked: _AskedTool,
        end_ns: int,
        answered: bool,
        result_bytes: int = 0,
    ) -> None:
        """One ``execute_tool`` span: answered (its result's size) or ended with its session."""
        tracer = self.tracer
        if tracer is None:
            return
        name = qualified_tool_name(asked.call)
        attributes = tool_attributes(asked.call, name or "")
        attributes[names.MODELTAP_TOOL_RESULT_SEEN] = answered
        if answered:
            attributes[names.MODELTAP_TOOL_RESULT_BYTES] = result_bytes
        if self.capture_content and asked.call.arguments is not None:
            arguments = json_value(asked.call.arguments)
            attributes |= content_values({names.TOOL_CALL_ARGUMENTS: arguments})
        links = self.tool_links(session_id, asked.call) if self.tool_links is not None else ()
        span = tracer.start_span(
            names.tool_span_name(name),
            context=asked.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=asked.asked_ns,
        )
        span.end(end_time=end_ns)
        if asked.root is not None:
            with self._lock:
                asked.root.last_end_ns = max(asked.root.last_end_ns, end_ns)

    def _end_unanswered(self, session_id: str, end_ns: int | None) -> None:
        """End the session's calls that never got a result, at ``end_ns`` or its last span."""
        with self._lock:
            tools = self._tools.pop(session_id, None)
        if tools is None:
            return
        for _call_id, asked in tools.pending.waiting():
            end = end_ns if end_ns is not None else tools.last_end_ns
            if asked.root is not None and end_ns is None:
                end = max(end, asked.root.last_end_ns)
            self._tool_span(session_id, asked, max(asked.asked_ns, end), False)

    def end_session(self, session_id: str, end_ns: int | None) -> None:
        """End a session's root span (see :meth:`~modeltap.telemetry.Telemetry.end_session`).

        Its tool calls still awaiting a result end first, with the session.
        """
        self._end_unanswered(session_id, end_ns)
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
        self.metrics = None

    @never_raises
    def _end_leftovers(self, end_ns: int) -> None:
        with self._lock:
            leftovers = list(self._open.values())
        for span in leftovers:
            span._interrupt(end_ns)
        with self._lock:
            waiting = list(self._tools)
        for session_id in waiting:
            self._end_unanswered(session_id, None)
        with self._lock:
            roots = [root for root in self._sessions.values() if not root.ended]
            for root in roots:
                root.ended = True
                root.span.end(end_time=root.last_end_ns)
