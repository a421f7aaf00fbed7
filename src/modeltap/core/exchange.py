"""The life of one HTTP exchange, as data: facts in, lines and notices out.

The HTTP addon reads what mitmproxy saw and hands it here as plain values::

    request head   ──▶ Exchange.open()          ──▶ the exchange (or its Reply: refused, no route)
    request body   ──▶ Exchange.receive_body()  ──▶ audit line, then upstream (or work off
                       Exchange.resume()             the loop first: decode, hash)
                       Exchange.pass_through()  (not a model request, or a WebSocket handshake)
    response head  ──▶ Exchange.started()       ──▶ a StreamTap for a stream, observed as it passes
    response end   ──▶ Exchange.ended()         ──▶ response (or unaudited) event
    failure        ──▶ Exchange.failed()        ──▶ error event (+ response event if audited)

Where it is in that life is its :class:`State`, as h11 keeps a connection's:
each step moves it through :meth:`Exchange._enter`, the one transition check
(:data:`NEXT` says where each state may go), and a step that comes too late
changes nothing (mitmproxy calls the response hook for modeltap's own answer
too, and an error may follow the end).

On an MCP route (SPEC 3b) each step hands its MCP part to the exchange's
:class:`~modeltap.core.mcp_exchange.McpExchange` (its POST bodies are
JSON-RPC, audited one line per message; its GET streams and DELETEs pass,
observed), and answers in MCP's JSON-RPC error shape.

The run (:class:`~modeltap.core.run.Run`) holds what exchanges share and writes
the lines; each step publishes what happened to the run's listeners. Times
are ``time.perf_counter_ns()`` readings handed in by the caller, so tests
choose them. Nothing here imports mitmproxy or OpenTelemetry.

Over 500 lines, on purpose: about 430 of code, the rest the contracts of its
steps. The judgements are elsewhere (the head's in :mod:`~modeltap.core.gate`,
the body's in :mod:`~modeltap.core.body_audit`, the lines in the run); what is
left is one life that moves one state, read in order, and split it would hand
that state from module to module.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from modeltap import apis
from modeltap.apis.contract import EndpointMatch
from modeltap.apis.mcp.messages import McpBody
from modeltap.core import answers
from modeltap.core.body_audit import (
    Audited,
    BodyAudit,
    RequestBody,
    Work,
    WorkDone,
    hash_as_it_arrives,
    model_reader,
)
from modeltap.core.gate import (
    RequestHead,
    destination,
    fail_closed,
    identify,
    is_control_address,
    is_control_path,
    judge_head_bytes,
    judge_request_line,
    overlong_id_header,
    switch_asked,
)
from modeltap.core.mcp_exchange import (
    McpExchange,
    McpStreamTap,
    mcp_session_id,
    request_session_key,
)
from modeltap.core.mcp_exchange import (
    judge_request_line as judge_mcp_request_line,
)
from modeltap.core.mcp_exchange import (
    read_body as read_mcp_body,
)
from modeltap.core.notices import ExchangeView, Forward, Outcome, Reply
from modeltap.core.observe import StreamTap, observe_body, stream_framing, with_header_facts
from modeltap.core.run import Run
from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Json,
    RequestFacts,
    ResponseEvent,
    ResponseFacts,
    UnauditedEvent,
)
from modeltap.rules.errors import Rejected, Rule, error_message
from modeltap.rules.failures import ANSWER_STATUS, PHASE_TEXT, Phase
from modeltap.rules.routing import Route

#: Forward as it is (no listener tagged it).
_FORWARD: Final = Forward()


class State(enum.Enum):
    """Where an exchange is in its life."""

    #: Its head was judged and it goes on: its body is awaited.
    OPEN = "open"
    #: Its body is being audited (work off the loop may be under way).
    AUDITING = "auditing"
    #: modeltap answered it itself (refused, no route, stopped): never forwarded.
    ANSWERED = "answered"
    #: It went upstream, audited or passed through (or a ``forwarding``
    #: listener answered in the upstream's place: that answer is its response).
    FORWARDED = "forwarded"
    #: The upstream's response head arrived.
    RESPONDING = "responding"
    #: It ended: its last line is written.
    DONE = "done"


#: Where each state may go. ANSWERED and DONE go nowhere: the exchange is over.
NEXT: Final[Mapping[State, frozenset[State]]] = {
    # Its client may leave before its body is whole (DONE: an error event).
    State.OPEN: frozenset({State.AUDITING, State.FORWARDED, State.ANSWERED, State.DONE}),
    State.AUDITING: frozenset({State.FORWARDED, State.ANSWERED, State.DONE}),
    # A 101 modeltap cannot follow is refused in the switch's place (ANSWERED).
    State.FORWARDED: frozenset({State.RESPONDING, State.ANSWERED, State.DONE}),
    State.RESPONDING: frozenset({State.ANSWERED, State.DONE}),
    State.ANSWERED: frozenset(),
    State.DONE: frozenset(),
}


class Exchange:
    """One HTTP exchange, from its request head to its end (the HTTP addon's own)."""

    def __init__(
        self, run: Run, id: str, session_id: str, request_id: str, method: str, path: str = ""
    ) -> None:
        self.run = run
        self.state = State.OPEN
        # What it is (its view shows it): settled once open() returns.
        self.id = id
        self.session_id = session_id
        self.request_id = request_id
        self.method = method
        self.path = path
        self.host = ""
        self.route: Route | None = None
        self.upstream = ""
        self.api: str | None = None
        self.websocket = False
        #: The request was the WebSocket handshake modeltap follows (any endpoint).
        self.handshake = False
        #: The model endpoint its path names (judged once, by the gate), by
        #: whatever method: a request by another than POST passes only without a body.
        self.endpoint: EndpointMatch | None = None
        self.signed = False  # AWS SigV4: forwarded byte-for-byte, or refused
        self.traceparent: str | None = None
        self.conversation_id: str | None = None
        #: modeltap's own answer (ANSWERED; or the refusal that replaced a 101).
        self.reply: Reply | None = None
        # What was audited (FORWARDED on).
        self.record: AuditRecord | None = None
        self.facts: RequestFacts | None = None
        #: The audited body, parsed (:attr:`Audited.body`).
        self.body: Json | None = None
        self.turn: int | None = None
        self.t_forward_ns = 0
        # What came back (RESPONDING on).
        self.status: int | None = None
        self.t_first_byte_ns: int | None = None
        #: Observes an audited event stream as it passes.
        self.tap: StreamTap | None = None
        self.response_headers: Mapping[str, str] | None = None
        self.streamed = False
        self._view: ExchangeView | None = None
        #: Its MCP side, on an MCP route (SPEC 3b).
        self.mcp: McpExchange | None = None
        #: The audit of its body (AUDITING): a model request's, or an MCP POST's.
        self._audit: BodyAudit[Any] | None = None
        self._request_headers: Mapping[str, str] = {}

    def _enter(self, state: State) -> bool:
        """The one transition check: go to ``state`` if the exchange may from where it is.

        Returns:
            False, changing nothing, when it may not: the step comes too late
            (the exchange was answered, or it ended).
        """
        if state not in NEXT[self.state]:
            return False
        self.state = state
        return True

    # ------------------------------------------------------------------ the head

    @classmethod
    def open(cls, run: Run, head: RequestHead, now: int) -> Exchange:
        """Judge a request's head: the exchange it starts, answered already
        (``reply``, :attr:`State.ANSWERED`) when it is refused or matches no route.

        Three steps, each of which may answer it: who it is and whether it may
        be heard at all (:meth:`_identify`), where it goes (:meth:`_route`),
        and what it asks of a route (:meth:`_judge`).

        Args:
            run: the run it belongs to.
            head: the request's head.
            now: when it arrived.
        """
        ex, switch = cls._identify(run, head, now)
        if ex.state is State.OPEN:
            ex._route(head, now)
        if ex.state is State.OPEN and not head.broken:
            ex._judge_bytes(head, now)  # whatever it asks of a route, or with none
        if ex.state is State.OPEN and ex.route is not None:
            ex._judge(head, switch, now)
        if ex.state is State.OPEN and ex.api is not None:
            ex._start(head, now)
        return ex

    @classmethod
    def _identify(cls, run: Run, head: RequestHead, now: int) -> tuple[Exchange, bool | None]:
        """Its ids (SPEC 2, 5), and whether it may be heard: not after stop, not
        with an id too long for every line, not in a session the harness ended,
        never for the control API.

        Returns:
            The exchange, and what :func:`~modeltap.core.gate.switch_asked` said of it.
        """
        s, headers, switch = run.settings, head.headers, switch_asked(head)
        session_id, request_id = identify(
            session_header=head.session,
            client_request_id=headers.get("x-client-request-id"),
            request_id=headers.get("x-request-id"),
            websocket=switch is True,
            fallback_id=head.id,
            default_session=s.session or run.run_id,
        )
        ex = cls(run, head.id, session_id, request_id, head.method)
        ex.signed, ex.handshake = head.signed, switch is True
        if run.stopped:
            ex.reply_after_stop(now)
            return ex, switch
        overlong = overlong_id_header(request_id, head.session)
        if overlong is not None:
            # Both ids go into every line: one made of prompt text is refused by
            # name (SPEC 8), and the refusal is filed under ids of our own.
            ex.session_id, ex.request_id, ex.path = s.session or run.run_id, head.id, head.target
            ex.refuse(Rejected(Rule.VALUE_TOO_LONG, overlong), now)
            return ex, switch
        ex.path = head.target
        # A session that only sends other requests still ends (and is reported).
        if run.session(session_id) is None and not _to_mcp(run, head):
            # The harness ended it: nothing more goes through in its name, so a
            # refusal in it can never be followed by traffic that looks complete.
            # (On an MCP route its MCP side refuses it, in JSON-RPC's shape.)
            ex.refuse(Rejected(Rule.SESSION_ENDED), now)
        elif is_control_path(head.target) or (
            s.mode == "regular"
            and is_control_address(head.host, head.port, run.control_address, head.resolved)
        ):
            # The control API is the harness's: never answered or forwarded here.
            ex.refuse(Rejected(Rule.CONTROL_NOT_ON_PROXY_PORT), now)
        return ex, switch

    def _route(self, head: RequestHead, now: int) -> None:
        """Where it goes (:func:`~modeltap.core.gate.destination`); no route: a
        404, logged as unaudited."""
        s = self.run.settings
        found = destination(s.mode, s.routes, head)
        if found is None:
            self.host = head.host
            self.answer_unrouted(now)
            return
        self.route, self.path, self.upstream, self.host = (
            found.route,
            found.path,
            found.upstream,
            found.host,
        )
        self.traceparent = head.headers.get("traceparent")
        self.conversation_id = head.session or (s.session if not self.handshake else None)
        if found.route is not None and found.route.mcp:
            self._open_mcp(head, found.route, now)

    def _open_mcp(self, head: RequestHead, route: Route, now: int) -> None:
        """On an MCP route: its MCP side, and its session when none was named (one
        per ``Mcp-Session-Id``, SPEC 3b), which must not have ended."""
        s = self.run.settings
        key = request_session_key(head.headers, head.target)
        named = head.session is not None or s.session is not None
        self.api = apis.MCP.NAME
        self.mcp = McpExchange(
            self.run, self, route, key, head.method, head.headers, named_session=named
        )
        if not named and key is not None:
            self.session_id = mcp_session_id(route.name, key)
            self._view = None
        if self.run.session(self.session_id) is None:
            self.refuse(Rejected(Rule.SESSION_ENDED), now)

    def rebind(self, session_id: str | None) -> None:
        """Its MCP session became known mid-stream (HTTP+SSE's endpoint event):
        its lines from now on name it (and its session, when one was not named)."""
        if session_id is not None:
            self.session_id = session_id
        self._view = None

    def _judge_bytes(self, head: RequestHead, now: int) -> None:
        """Bytes in its head that no intermediary passes on
        (:func:`~modeltap.core.gate.judge_head_bytes`): refused, on a route or not."""
        try:
            fail_closed(judge_head_bytes, head.method, head.target, head.fields, head.session)
        except Rejected as e:
            self.refuse(e, now)

    def _judge(self, head: RequestHead, switch: bool | None, now: int) -> None:
        """What it asks of its route (SPEC 2): a switch modeltap can follow, a
        request line it can audit (a model request, a WebSocket audited message
        by message, another method to a model endpoint), no signature it would
        break."""
        if switch is None:
            # An upstream could switch it into a raw tunnel: nothing in it audited.
            self.refuse(Rejected(Rule.UNSUPPORTED_UPGRADE), now)
            return
        if self.mcp is not None:
            self._judge_mcp(head, switch, now)
            return
        names = (name.decode("latin-1") for name, _ in head.fields)
        try:
            kind = head.headers.get("content-type")
            self.endpoint = fail_closed(
                judge_request_line, head.method, head.target, self.path, names, switch, kind
            )
        except Rejected as e:
            self.refuse(e, now)
            return
        api = self.endpoint.api if self.endpoint is not None else None
        if switch and apis.websocket_mode(api) is not None:
            self.websocket = True  # audited message by message once it is open
        elif head.method == "POST":
            self.api = api
        s = self.run.settings
        if head.signed and s.mode != "regular" and s.upstreams_check_signatures:
            # Sent to another host and path, its signature would fail: say so instead.
            self.refuse(Rejected(Rule.SIGNED_REQUEST), now)

    def _judge_mcp(self, head: RequestHead, switch: bool, now: int) -> None:
        """What a request asks of an MCP route: no switch, a line it can judge
        (:func:`~modeltap.core.mcp_exchange.judge_request_line`), no signature
        it would break."""
        if switch:
            self.refuse(Rejected(Rule.WS_UNSUPPORTED_ENDPOINT, "an MCP route"), now)
            return
        names = (name.decode("latin-1") for name, _ in head.fields)
        try:
            kind = head.headers.get("content-type")
            fail_closed(judge_mcp_request_line, head.method, head.target, names, kind)
        except Rejected as e:
            self.refuse(e, now)
            return
        s = self.run.settings
        if head.signed and s.mode != "regular" and s.upstreams_check_signatures:
            self.refuse(Rejected(Rule.SIGNED_REQUEST), now)

    def _start(self, head: RequestHead, now: int) -> None:
        """A model request (or an MCP exchange) starts: a model request's
        ``started`` notice, then a body declared larger than ``--max-body`` is
        refused before it is read."""
        if self.mcp is None and self.run.listeners.hear.started:
            self.run.listeners.started(self.view, now)
        length = head.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.run.settings.max_body:
            self.refuse(Rejected(Rule.BODY_TOO_LARGE), now)

    @classmethod
    def open_tunnel(cls, run: Run, head: RequestHead, now: int) -> Exchange:
        """Judge a CONNECT (regular mode): refused after stop, to the control
        listener, or with bytes in its head no intermediary passes on."""
        session_id = head.session or run.settings.session or run.run_id
        ex = cls(run, head.id, session_id, head.id, head.method)
        if run.stopped:
            ex.reply_after_stop(now)
            return ex
        ex.path = head.target
        if is_control_address(head.host, head.port, run.control_address, head.resolved):
            ex.refuse(Rejected(Rule.CONTROL_NOT_ON_PROXY_PORT), now)
        else:
            ex._judge_bytes(head, now)
        return ex

    @property
    def view(self) -> ExchangeView:
        """The frozen view of the exchange as it is now."""
        if self._view is None:
            self._view = ExchangeView(
                id=self.id,
                session_id=self.session_id,
                request_id=self.request_id,
                transport="http",
                method=self.method,
                path=self.path,
                route=self.route,
                upstream=self.upstream,
                api=self.api,
                traceparent=self.traceparent,
                conversation_id=self.conversation_id,
                websocket=self.websocket,
                record=self.record,
                turn=self.turn,
                endpoint=self.endpoint,
                body=self.body,
                mcp_server=self.mcp.server if self.mcp is not None else None,
                mcp_session=self.mcp.key if self.mcp is not None else None,
            )
        return self._view

    @property
    def open_ended(self) -> bool:
        """Whether its answer is a stream with no end in sight: an MCP GET stream,
        silent for as long as the server has nothing to say (no idle limit)."""
        return self.mcp is not None and self.method == "GET"

    @property
    def audited(self) -> bool:
        """Whether its audit line was written (it went, or goes, upstream)."""
        return self.record is not None

    @property
    def rerouted(self) -> bool:
        """Whether the request must be re-pointed at its route's upstream (reverse mode)."""
        return (
            self.state is not State.ANSWERED
            and self.route is not None
            and self.run.settings.mode != "regular"
        )

    # ------------------------------------------------------------------ answers

    def refuse(self, rejected: Rejected, now: int) -> Reply:
        """Refuse the request: the provider-shaped answer, its event, its notice
        (once it is over, only the answer: nothing more is written for it). On
        an MCP route: a JSON-RPC error for its ids, its line naming its messages."""
        mcp = self.mcp
        reply = (
            answers.refusal(rejected, self.api, self.route)
            if mcp is None
            else mcp.refusal(rejected)
        )
        if self._enter(State.ANSWERED):
            self.reply = reply
            refused = mcp.refused() if mcp is not None else None
            self.run.refused(self.view, rejected, rejected.status, now, mcp=refused)
        return reply

    def reply_after_stop(self, now: int) -> None:
        """After stop the files are final: refuse, write nothing, only the notice."""
        self._enter(State.ANSWERED)
        rejected = Rejected(Rule.PROXY_STOPPED)
        self.reply = answers.stopping()
        self.run.listeners.finished(
            Outcome(self.view, now, status=rejected.status, rejected=rejected)
        )

    def answer_unrouted(self, now: int) -> None:
        """No route matches the path: a 404, logged as an unaudited request."""
        self._enter(State.ANSWERED)
        self.reply = answers.no_route(self.path, self.run.settings.routes)
        self._unaudited(404, now)

    # ------------------------------------------------------------------ the body

    def pass_through(
        self, body: Callable[[], bytes], headers: Mapping[str, str], body_bytes: int = 0
    ) -> Forward | Reply:
        """Let a request that is not audited go (a WebSocket handshake is audited
        message by message once open), unless ``--strict`` refuses it.

        A request to a model endpoint by another method than POST passes only
        without a body (``GET`` lists stored completions, ``HEAD`` and
        ``OPTIONS`` probe): with one, a server that routes on the path alone
        would run it as a model request (``method_override``).

        Args:
            body: its decoded body, read only if a listener asks for bodies.
            headers: its headers.
            body_bytes: the size of its body as received.
        """
        now = time.perf_counter_ns()
        if self.endpoint is not None and not self.websocket and body_bytes:
            return self.refuse(Rejected(Rule.METHOD_OVERRIDE), now)
        if (
            not self.websocket
            and self.run.settings.strict
            and not apis.is_models_listing(self.method, self.path)
        ):
            return self.refuse(Rejected(Rule.STRICT_UNAUDITED), now)
        if not self._enter(State.FORWARDED):
            return self.refuse(Rejected(Rule.AUDIT_INTERNAL_ERROR), now)
        self.t_forward_ns = now
        return self._forwarding(body() if self.run.listeners.hear.forwarding else b"", headers)

    def hash_as_it_arrives(self, content_length: str) -> bool:
        """Whether the glue should hash the body while it arrives, given its
        ``Content-Length`` (:func:`~modeltap.core.body_audit.hash_as_it_arrives`)."""
        return self.api is not None and hash_as_it_arrives(
            content_length, self.run.settings.image_detail
        )

    def receive_body(self, body: RequestBody, now: int) -> Forward | Reply | Work:
        """The model request's body arrived whole: audit it, then forward or refuse it.

        Args:
            body: the body, and the headers its audit reads.
            now: when.

        Returns:
            How to forward it (its audit line is written), the answer that
            replaces it (a refusal, or a listener's: a replay that does not
            match), or the work its audit needs first (:mod:`~modeltap.core.body_audit`):
            do it, then hand the result to :meth:`resume`.
        """
        s = self.run.settings
        if self.mcp is not None and self.method != "POST":
            return self._pass_mcp(body, now)
        if self.api is None or not self._enter(State.AUDITING):
            return self.refuse(Rejected(Rule.AUDIT_INTERNAL_ERROR), now)
        if self.mcp is not None:
            self._audit = BodyAudit(read_mcp_body, max_body=s.max_body)
        else:
            read = model_reader(
                self.api, self.endpoint, signed=self.signed, image_detail=s.image_detail
            )
            self._audit = BodyAudit(read, max_body=s.max_body)
        self._request_headers = body.headers
        return self._audit_step(self._audit.start(body), now)

    def _pass_mcp(self, body: RequestBody, now: int) -> Forward | Reply:
        """An MCP GET stream, a DELETE (no body: a body by another method than
        POST is refused, a server may read it as messages): passed, observed,
        within its session's policy."""
        assert self.mcp is not None
        if body.raw:
            return self.refuse(Rejected(Rule.METHOD_OVERRIDE), now)
        try:
            self.run.admit(self.view)
        except Rejected as e:
            return self.refuse(e, now)
        if not self._enter(State.FORWARDED):
            return self.refuse(Rejected(Rule.AUDIT_INTERNAL_ERROR), now)
        self.t_forward_ns = self.mcp.forwarded_ns = now
        self.run.in_flight[self.id] = self
        return self.mcp.forwarding(self._forwarding(b"", body.headers))

    def resume(self, done: WorkDone, now: int) -> Forward | Reply | Work:
        """The work :meth:`receive_body` asked for is done (or the glue could not
        do it: :class:`~modeltap.core.body_audit.Failed`): go on, as it."""
        if self._audit is None or self.state is not State.AUDITING:
            # It ended while the work was under way: never forwarded.
            return self.refuse(Rejected(Rule.AUDIT_INTERNAL_ERROR), now)
        return self._audit_step(self._audit.resume(done), now)

    def _audit_step(self, step: Work | Audited[Any] | Rejected, now: int) -> Forward | Reply | Work:
        if isinstance(step, Rejected):
            return self.refuse(step, now)
        if isinstance(step, Audited):
            return self._forward(step, now)
        return step

    def _forward(self, audited: Audited[Any], now: int) -> Forward | Reply:
        """Write the audit line and let the request go, or refuse it."""
        if self.mcp is not None:
            return self._forward_mcp(audited, now)
        facts = audited.facts
        try:
            self.record = self.run.audit(self.view, facts, audited.size, audited.sha256)
        except Rejected as e:
            return self.refuse(e, now)
        self._enter(State.FORWARDED)
        self.facts, self.body = facts, audited.body
        self.turn = self.run.sessions.open[self.session_id].requests_audited
        self._view = None
        self.run.in_flight[self.id] = self
        self.t_forward_ns = now
        if self.run.listeners.hear.audited:
            self.run.listeners.audited(self.view, facts, audited.sent, now)
        return self._forwarding(audited.sent, self._request_headers)

    def _forward_mcp(self, audited: Audited[McpBody], now: int) -> Forward | Reply:
        """Write an MCP POST's audit lines (one per message) and let it go, or refuse it."""
        assert self.mcp is not None
        try:
            self.mcp.audit(audited.facts, self._request_headers, audited.size, audited.sha256, now)
        except Rejected as e:
            return self.refuse(e, now)
        self._enter(State.FORWARDED)
        self.run.in_flight[self.id] = self
        self.t_forward_ns = now
        return self._forwarding(audited.sent, self._request_headers)

    def _forwarding(self, body: bytes, headers: Mapping[str, str]) -> Forward | Reply:
        if not self.run.listeners.hear.forwarding:
            return _FORWARD
        return self.run.listeners.forwarding(self.view, body, headers)

    # ------------------------------------------------------------------ response

    def started(
        self, status: int, headers: Mapping[str, str], now: int
    ) -> StreamTap | McpStreamTap | bool | None:
        """The response head arrived.

        Returns:
            How to pass the body on: a :class:`StreamTap` or
            :class:`~modeltap.core.mcp_exchange.McpStreamTap` (stream it
            through the observer), True (stream it untouched), or None
            (mitmproxy reads it whole).
        """
        if not self._enter(State.RESPONDING):
            return None
        self.status = status
        self.t_first_byte_ns = now
        self.response_headers = headers
        if self.run.listeners.hear.first_byte:
            self.run.listeners.first_byte(self.view, status, headers, now)
        if self.mcp is not None:
            on_chunk = self._chunk if self.run.listeners.hear.chunk else None
            tap = self.mcp.response(status, headers, on_chunk)
            self.streamed = tap is not None
            return tap
        framing = stream_framing(headers.get("content-type", ""), self.api, self.facts, status)
        if framing is None:
            return None
        # Never buffer a stream: each chunk goes on to the agent as it arrives.
        self.streamed = True
        on_chunk = self._chunk if self.run.listeners.hear.chunk else None
        if self.audited and self.api is not None and self.facts is not None:
            self.tap = StreamTap.observing(
                self.api,
                self.facts,
                headers.get("content-encoding", ""),
                framing=framing,
                capture_content=self.run.settings.capture_content,
                on_first_chunk=self._first_chunk if self.run.listeners.hear.first_chunk else None,
                on_chunk=on_chunk,
            )
        elif on_chunk is not None:
            self.tap = StreamTap(None, None, on_chunk=on_chunk)
        return self.tap if self.tap is not None else True

    def _first_chunk(self, t_ns: int) -> None:
        self.run.listeners.first_chunk(self.view, t_ns)

    def _chunk(self, data: bytes, t_ns: int) -> None:
        self.run.listeners.chunk(self.view, data, t_ns)

    def switched(self, websocket_opened: bool, now: int) -> Reply | None:
        """The upstream answered ``101 Switching Protocols``.

        Whatever modeltap judged the request to be, the upstream's answer
        decides what the connection becomes: mitmproxy opens a WebSocket only
        for a version 13 handshake answered ``Upgrade: websocket``, and turns
        any other switch into a raw tunnel no hook sees. On a route, a switch
        to anything but the WebSocket modeltap follows is refused instead.

        Args:
            websocket_opened: mitmproxy will open the connection as a WebSocket.
            now: when.

        Returns:
            The refusal that replaces the 101 (the connection is then closed),
            or None when the switch is the WebSocket modeltap follows, or the
            exchange is not on a route.
        """
        if self.route is None or self.state is State.ANSWERED:
            return None  # not on a route, or the answer is modeltap's own (never a 101)
        if self.handshake and websocket_opened:
            return None
        rejected = Rejected(Rule.UNSUPPORTED_UPGRADE)
        if self.audited and self._enter(State.DONE):
            # A model request answered by a switch: the upstream broke HTTP; its
            # response event says the evidence is incomplete.
            self._fail("upstream_protocol_error", None, now, request_complete=True)
            reply = answers.refusal(rejected, self.api, self.route)
        else:
            # Refused even once it is over (the run stopped meanwhile): never a tunnel.
            reply = self.refuse(rejected, now)
        self.reply = replace(reply, close=True)
        return self.reply

    def ended(
        self,
        status: int,
        raw: bytes | None,
        encoding: str | None,
        expired: Phase | None,
        now: int,
    ) -> None:
        """The response ended whole, as far as mitmproxy saw.

        Args:
            status: its status.
            raw: its body as the upstream sent it (None when streamed).
            encoding: its ``content-encoding``.
            expired: the phase whose limit modeltap enforced, if one did: a
                body that ends when the connection closes, cut by the idle
                limit, looks whole to mitmproxy, but modeltap ended it.
            now: when.
        """
        # After stop the files are final: nothing more is written.
        if self.run.stopped or not self._enter(State.DONE):
            return
        if self.websocket and status == 101:
            return  # the connection is reported by ws_open / ws_close
        self.status = status
        if expired is not None:
            self._fail("upstream_timeout", expired, now, request_complete=True)
            return
        if self.mcp is not None:
            self._end_mcp(now, body=raw, encoding=encoding)
            return
        if not self.audited:
            self._unaudited(status, now, body=raw)
            return
        content: bytes | None = None
        if self.tap is not None:
            facts = self.tap.finish()
        else:
            assert self.api is not None
            facts, content = observe_body(self.api, self.facts, raw or b"", encoding, status)
        self._respond(facts, now, body=raw, content=content)

    def failed(
        self, kind: str, expired: Phase | None, now: int, *, request_complete: bool
    ) -> Reply | None:
        """mitmproxy reports the exchange broken (or a deadline ended it).

        Args:
            kind: the failure kind (:func:`modeltap.rules.failures.classify_failure`).
            expired: the phase whose limit modeltap enforced, if one did.
            now: when.
            request_complete: whether the request had been read whole.

        Returns:
            The answer the agent gets when no response reached it yet and
            modeltap ended the exchange (a 504 for ``upstream_timeout``).
        """
        # After stop the files are final: nothing more is written.
        if self.run.stopped or not self._enter(State.DONE):
            return None
        if (
            kind == "client_gone"
            and self.mcp is not None
            and self.mcp.records
            and self.mcp.answered
        ):
            # Every request of the POST had its answer: a client that closes then
            # (its SDK stops reading after the result) ended the exchange, nothing broke.
            self._end_mcp(now)
            return None
        if kind == "client_gone" and self.audited and self.tap is not None and self.tap.done:
            # Clients (the sync openai SDK) close right after the terminal event, before
            # the body's last bytes (chunk terminator, a compressor's tail): the whole
            # answer was seen, so this is the end of the response, not a client gone.
            self._respond(self.tap.finish(), now, failure=kind)
            return None
        answer = None
        if kind in ANSWER_STATUS and self.status is None:
            answer = answers.failure(kind, expired, self.api, self.route)
        self._fail(kind, expired, now, request_complete=request_complete)
        return answer

    def stop(self, now: int) -> None:
        """Shutdown: an audited exchange whose response has not ended ends here."""
        if not self._enter(State.DONE):
            return
        if self.tap is not None and self.tap.done:
            # The whole answer was seen; only its last bytes had not gone through.
            self._respond(self.tap.finish(), now)
            return
        self._fail("proxy_stopped", None, now, request_complete=True)

    # ------------------------------------------------------------------ the lines of its end

    def _fail(self, kind: str, expired: Phase | None, now: int, *, request_complete: bool) -> None:
        """An error event, then (if audited) the response event."""
        if self.mcp is not None:
            self._fail_mcp(kind, expired, now)
            return
        unaudited = None
        if not self.audited and self.api is None and request_complete:
            # It was passed through, then failed.
            unaudited = self.run.unaudited(self.view, self.host, None)
        # In modeltap's own words: mitmproxy's message can quote the upstream's
        # (a malformed status line echoing the request, say).
        text = PHASE_TEXT[expired] if expired else error_message(kind)
        error = self.run.failure(self.view, self.record.seq if self.record else None, kind, text)
        if self.audited:
            if self.tap is not None:
                facts = self.tap.finish(f"{kind}: {text}")
            else:
                facts = ResponseFacts(evidence_complete=False, capture_errors=(f"{kind}: {text}",))
            self._respond(facts, now, error=error, failure=kind, expired=expired)
            return
        self._finish(now, unaudited=unaudited, error=error, failure=kind, expired=expired)

    def _end_mcp(
        self,
        now: int,
        *,
        body: bytes | None = None,
        encoding: str | None = None,
        error: ErrorEvent | None = None,
        failure: str | None = None,
        expired: Phase | None = None,
    ) -> None:
        """An MCP exchange ended: what its answer said, its lines, its notice."""
        assert self.mcp is not None
        self.run.in_flight.pop(self.id, None)
        mcp = self.mcp.ended(self.status, body, encoding, now, failure)
        if self.run.listeners.hear.finished:
            outcome = Outcome(
                self.view, now, status=self.status, error=error, failure=failure,
                expired=expired, streamed=self.streamed, body=body, mcp=mcp,
            )  # fmt: skip
            self.run.listeners.finished(outcome)

    def _fail_mcp(self, kind: str, expired: Phase | None, now: int) -> None:
        """An MCP exchange broke: a POST's error event (its messages may have
        gone unanswered), then its end. A GET stream or a DELETE writes none:
        clients leave streams open and go, and the stream's line says how it ended."""
        assert self.mcp is not None
        error = None
        if self.method == "POST":
            text = PHASE_TEXT[expired] if expired else error_message(kind)
            records = self.mcp.records
            error = self.run.failure(self.view, records[0].seq if records else None, kind, text)
        self._end_mcp(now, error=error, failure=kind, expired=expired)

    def _respond(
        self,
        facts: ResponseFacts,
        now: int,
        *,
        error: ErrorEvent | None = None,
        failure: str | None = None,
        expired: Phase | None = None,
        body: bytes | None = None,
        content: bytes | None = None,
    ) -> None:
        self.run.in_flight.pop(self.id, None)
        facts = with_header_facts(facts, self.api, self.route, self.response_headers)
        event = self.run.respond(
            self.view,
            facts,
            status=self.status,
            stream=self.streamed,
            start_ns=self.t_forward_ns,
            first_byte_ns=self.t_first_byte_ns,
            first_chunk_ns=self.tap.first_chunk_ns if self.tap is not None else None,
            end_ns=now,
        )
        self._finish(
            now, status=self.status, response=event, error=error, failure=failure,
            expired=expired, body=body, content=content, observed=facts,
        )  # fmt: skip

    def _finish(
        self,
        now: int,
        *,
        status: int | None = None,
        response: ResponseEvent | None = None,
        unaudited: UnauditedEvent | None = None,
        error: ErrorEvent | None = None,
        failure: str | None = None,
        expired: Phase | None = None,
        body: bytes | None = None,
        content: bytes | None = None,
        observed: ResponseFacts | None = None,
    ) -> None:
        """The exchange ended: tell the listeners how (the :class:`Outcome`'s fields,
        built only if anyone hears it)."""
        if self.run.listeners.hear.finished:
            outcome = Outcome(
                self.view, now, status=status, response=response, unaudited=unaudited,
                error=error, failure=failure, expired=expired, streamed=self.streamed,
                body=body, content=content, observed=observed,
            )  # fmt: skip
            self.run.listeners.finished(outcome)

    def _unaudited(self, status: int | None, now: int, body: bytes | None = None) -> None:
        event = self.run.unaudited(self.view, self.host, status)
        self._finish(now, status=status, unaudited=event, body=body)


def _to_mcp(run: Run, head: RequestHead) -> bool:
    """Whether a request goes to an MCP route (it is refused in that route's shape)."""
    found = destination(run.settings.mode, run.settings.routes, head)
    return found is not None and found.route is not None and found.route.mcp
