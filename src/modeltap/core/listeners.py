"""The run's listeners, called as one :class:`~modeltap.core.notices.Listener`.

The core tells :class:`Listeners` what happened by calling the notice's own
method (``run.listeners.chunk(view, data, t_ns)``): every call is an ordinary
method call that strict mypy checks against the notice's signature, so there
is no notice name to misspell and no argument to pass in the wrong place.
Each method calls, in the order they subscribed, the listeners that override
it; one that raises is logged and skipped, never the exchange.

Building a notice's arguments costs time (a chunk's, once per chunk), so the
core first asks whether anyone hears it: :attr:`Listeners.hear`, computed
when a listener subscribes or leaves, is one flag per notice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Concatenate

from modeltap.core.notices import (
    ExchangeView,
    Forward,
    Listener,
    McpCall,
    McpEvent,
    Outcome,
    Reply,
)
from modeltap.evidence.records import McpAuditRecord, RequestFacts, WsCloseEvent

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Hearing:
    """Which notices have a listener: one flag per :class:`Listener` notice."""

    started: bool = False
    audited: bool = False
    forwarding: bool = False
    first_byte: bool = False
    first_chunk: bool = False
    chunk: bool = False
    message: bool = False
    finished: bool = False
    opened: bool = False
    closed: bool = False
    mcp_audited: bool = False
    mcp_observed: bool = False
    session_ended: bool = False
    stopped: bool = False


def _overriding[**P, R](
    listeners: Sequence[Listener], notice: Callable[Concatenate[Listener, P], R]
) -> tuple[Callable[P, R], ...]:
    """The bound ``notice`` methods of the listeners that override it: the
    others would only run the base class's empty body."""
    name = notice.__name__
    return tuple(
        getattr(listener, name)
        for listener in listeners
        if getattr(type(listener), name) is not notice
    )


def _failed(notice: str, error: Exception) -> None:
    # The exception's type only: its message may quote a request.
    logger.error("modeltap: a %s listener failed (%s)", notice, type(error).__name__)


def _tell[**P](
    notice: str, calls: tuple[Callable[P, None], ...], *args: P.args, **kwargs: P.kwargs
) -> None:
    """Call each of ``calls``; one that raises is logged and skipped."""
    for call in calls:
        try:
            call(*args, **kwargs)
        except Exception as e:
            _failed(notice, e)


class Listeners(Listener):
    """The listeners a run publishes to, each notice a typed method.

    Subscribe with :meth:`subscribe`; each notice then calls, synchronously and
    in subscription order, every listener that overrides it.
    """

    def __init__(self) -> None:
        self._subscribed: list[Listener] = []
        self._index()

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` from now on (once, however often subscribed)."""
        if listener not in self._subscribed:
            self._subscribed.append(listener)
            self._index()

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener``."""
        if listener in self._subscribed:
            self._subscribed.remove(listener)
            self._index()

    def __contains__(self, listener: object) -> bool:
        return listener in self._subscribed

    def _index(self) -> None:
        """Who hears what, computed once here rather than on every notice."""
        heard = self._subscribed
        self._started = _overriding(heard, Listener.started)
        self._audited = _overriding(heard, Listener.audited)
        self._forwarding = _overriding(heard, Listener.forwarding)
        self._first_byte = _overriding(heard, Listener.first_byte)
        self._first_chunk = _overriding(heard, Listener.first_chunk)
        self._chunk = _overriding(heard, Listener.chunk)
        self._message = _overriding(heard, Listener.message)
        self._finished = _overriding(heard, Listener.finished)
        self._opened = _overriding(heard, Listener.opened)
        self._closed = _overriding(heard, Listener.closed)
        self._mcp_audited = _overriding(heard, Listener.mcp_audited)
        self._mcp_observed = _overriding(heard, Listener.mcp_observed)
        self._session_ended = _overriding(heard, Listener.session_ended)
        self._stopped = _overriding(heard, Listener.stopped)
        #: Which notices anyone hears: check it before building a notice's arguments.
        self.hear = Hearing(
            started=bool(self._started),
            audited=bool(self._audited),
            forwarding=bool(self._forwarding),
            first_byte=bool(self._first_byte),
            first_chunk=bool(self._first_chunk),
            chunk=bool(self._chunk),
            message=bool(self._message),
            finished=bool(self._finished),
            opened=bool(self._opened),
            closed=bool(self._closed),
            mcp_audited=bool(self._mcp_audited),
            mcp_observed=bool(self._mcp_observed),
            session_ended=bool(self._session_ended),
            stopped=bool(self._stopped),
        )

    # ------------------------------------------------------------------ notices

    def started(self, view: ExchangeView, t_ns: int) -> None:
        _tell("started", self._started, view, t_ns)

    def audited(self, view: ExchangeView, facts: RequestFacts, body: bytes, t_ns: int) -> None:
        _tell("audited", self._audited, view, facts, body, t_ns)

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply:
        """Every listener's answer as one: the first :class:`Reply`, else a
        :class:`Forward` with every listener's tags, in subscription order.
        Every listener is called, also after a reply."""
        reply: Reply | None = None
        tags: list[tuple[str, str]] = []
        for call in self._forwarding:
            try:
                answer = call(view, body, headers)
            except Exception as e:
                _failed("forwarding", e)
                continue
            if isinstance(answer, Reply):
                reply = reply or answer
            elif isinstance(answer, Forward):
                tags.extend(answer.headers)
        return reply if reply is not None else Forward(tuple(tags))

    def first_byte(
        self, view: ExchangeView, status: int | None, headers: Mapping[str, str], t_ns: int
    ) -> None:
        _tell("first_byte", self._first_byte, view, status, headers, t_ns)

    def first_chunk(self, view: ExchangeView, t_ns: int) -> None:
        _tell("first_chunk", self._first_chunk, view, t_ns)

    def chunk(self, view: ExchangeView, data: bytes, t_ns: int) -> None:
        # Once per chunk: the loop is written out, one call fewer than _tell.
        for call in self._chunk:
            try:
                call(view, data, t_ns)
            except Exception as e:
                _failed("chunk", e)

    def message(
        self, view: ExchangeView, content: bytes, is_text: bool, from_client: bool, t_ns: int
    ) -> None:
        # Once per WebSocket message: written out like chunk.
        for call in self._message:
            try:
                call(view, content, is_text, from_client, t_ns)
            except Exception as e:
                _failed("message", e)

    def finished(self, outcome: Outcome) -> None:
        _tell("finished", self._finished, outcome)

    def opened(self, view: ExchangeView, t_ns: int) -> None:
        _tell("opened", self._opened, view, t_ns)

    def closed(self, view: ExchangeView, event: WsCloseEvent, t_ns: int) -> None:
        _tell("closed", self._closed, view, event, t_ns)

    def mcp_audited(
        self, view: ExchangeView, records: tuple[McpAuditRecord, ...], t_ns: int
    ) -> None:
        _tell("mcp_audited", self._mcp_audited, view, records, t_ns)

    def mcp_observed(
        self, view: ExchangeView, event: McpEvent, call: McpCall | None, t_ns: int
    ) -> None:
        _tell("mcp_observed", self._mcp_observed, view, event, call, t_ns)

    def session_ended(self, session_id: str) -> None:
        _tell("session_ended", self._session_ended, session_id)

    def stopped(self) -> None:
        _tell("stopped", self._stopped)
