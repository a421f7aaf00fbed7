"""The HTTP addon: mitmproxy's HTTP hooks, turned into calls on the exchange core.

Each hook reads what mitmproxy saw, hands it to :class:`~modeltap.core.exchange.Exchange`
and acts on the answer (forward, answer, stream through the observer, or do
the work the body's audit asks for: off the loop on a worker thread); the
decisions and the lines are the core's. It owns the options of the request
gate (mode, routes, strict, image detail, max body, the open-proxy refusal).

It also puts modeltap's answers in place of mitmproxy's HTML error page
(agents' SDKs want JSON in their provider's shape), installs the HTTP/1 body
reader fix (:mod:`modeltap.addons.patches.mitm_http1`) and the bound on request
bodies as they arrive (:mod:`modeltap.addons.patches.request_limit`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import time
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any, Final

from mitmproxy import exceptions, http
from mitmproxy.connection import ConnectionState, Server
from mitmproxy.net.http import http1, validate
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.utils import human

from modeltap.addons.base import Addon
from modeltap.addons.deadlines import Deadlines
from modeltap.addons.patches import error_page, mitm_http1, request_limit
from modeltap.core import answers
from modeltap.core.body_audit import (
    Decode,
    Digest,
    Failed,
    Hashed,
    Reencode,
    Reencoded,
    RequestBody,
    Work,
    WorkDone,
)
from modeltap.core.exchange import Exchange
from modeltap.core.gate import (
    SESSION_HEADER,
    RequestHead,
    is_control_address,
    needs_resolving,
    take_session,
)
from modeltap.core.notices import Forward, Reply
from modeltap.core.run import Run, Settings
from modeltap.rules.errors import Rejected, Rule
from modeltap.rules.failures import FailureFacts, Phase, classify_failure
from modeltap.rules.listening import (
    host_addresses,
    is_loopback,
    modeltap_mode,
    open_proxy_listeners,
    open_proxy_message,
)
from modeltap.rules.routing import RouteError, RouteTable

logger = logging.getLogger(__name__)

#: ``flow.metadata`` key of the frozen :class:`~modeltap.core.notices.ExchangeView`
#: of a forwarded WebSocket handshake (the WebSocket addon opens its connection).
VIEW_KEY: Final = "modeltap"
#: ``flow.metadata`` key of this addon's own :class:`~modeltap.core.exchange.Exchange`.
_EXCHANGE: Final = "modeltap_exchange"

#: The answer modeltap chose for the failure being reported, set by the ``error``
#: hook. mitmproxy builds its error page right after that hook returns, in the
#: same asyncio task (the hook's task resumes the HTTP layer), so a context
#: variable hands the choice over without leaking it to other connections.
_FAILURE_ANSWER: contextvars.ContextVar[bytes | None] = contextvars.ContextVar(
    "modeltap_failure_answer", default=None
)


class Http(Addon):
    """Audit every model request before it is forwarded; observe what comes back."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_http"

    OPTIONS = (
        "mode",
        "routes",
        "upstream",
        "mcp",
        "mcp_hosts",
        "strict",
        "image_detail",
        "max_body",
        "allow_open_proxy",
    )

    def __init__(self, run: Run, deadlines: Deadlines) -> None:
        super().__init__(run)
        self.deadlines = deadlines

    def configure(self, updated: set[str]) -> None:
        self.check(updated)
        opts = self.options
        if {"mode", "listen_host", "proxyauth", "modeltap_allow_open_proxy"} & updated:
            _refuse_open_proxy(opts)  # first: whatever else is wrong, never an open proxy
        self.run.settings = _settings(self.run.settings, opts, updated)
        if "stream_large_bodies" in updated and opts.stream_large_bodies:
            # mitmproxy would forward a large request body as it arrives, before the
            # request hook: a model request would reach the upstream unaudited.
            raise exceptions.OptionsError(
                "modeltap cannot audit with stream_large_bodies set (request bodies would be "
                "forwarded before the audit); unset it, modeltap_max_body bounds requests"
            )
        _install()

    # ------------------------------------------------------------------ hooks

    def requestheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        self.deadlines.watch(flow, "request")  # a body that stalls must not hang forever
        req = flow.request
        session, signed = take_session(req.headers, req.path)
        if self._resolving(req.host, req.port):
            return self._open_resolved(flow, session, signed)
        self._open(flow, _head(flow, session, signed))
        return None

    def _resolving(self, host: str, port: int) -> bool:
        """Whether the target's name must be looked up before its head is judged
        (regular mode, a name on the control listener's port)."""
        control = self.run.control_address
        return self.run.settings.mode == "regular" and needs_resolving(host, port, control)

    async def _open_resolved(self, flow: http.HTTPFlow, session: str | None, signed: bool) -> None:
        resolved = await _resolve(flow.request.host, flow.request.port)
        self._open(flow, replace(_head(flow, session, signed), resolved=resolved))

    def _open(self, flow: http.HTTPFlow, head: RequestHead) -> None:
        req = flow.request
        ex = flow.metadata[_EXCHANGE] = Exchange.open(self.run, head, time.perf_counter_ns())
        if ex.reply is not None:
            _answer(flow, ex.reply)
            return
        if ex.rerouted:
            assert ex.route is not None
            req.scheme, req.host, req.port = ex.route.scheme, ex.route.host, ex.route.port
            req.path = ex.path
            req.host_header = ex.route.url.split("://", 1)[1].split("/", 1)[0]
        if ex.hash_as_it_arrives(req.headers.get("content-length", "")):
            # Hashed as it arrives (request_limit), for its audit line.
            flow.metadata[request_limit.HASH_KEY] = request_limit.BodyHash()

    def modeltap_request_too_large(self, flow: http.HTTPFlow) -> None:
        """A request body passed --max-body while it arrived (request_limit): refuse
        it now; the rest is not read, nothing is forwarded. Pass-through requests
        too: modeltap buffers every request, and the bound must hold for all."""
        ex: Exchange | None = flow.metadata.get(_EXCHANGE)
        if ex is not None and flow.response is None and not self.run.stopped:
            _answer(flow, ex.refuse(Rejected(Rule.BODY_TOO_LARGE), time.perf_counter_ns()))

    def http_connect(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        # Regular mode: a tunnel to the control listener is refused like a request to it.
        head = _head(flow, flow.request.headers.get(SESSION_HEADER))
        if self._resolving(head.host, head.port):
            return self._tunnel_resolved(flow, head)
        self._tunnel(flow, head)
        return None

    async def _tunnel_resolved(self, flow: http.HTTPFlow, head: RequestHead) -> None:
        self._tunnel(flow, replace(head, resolved=await _resolve(head.host, head.port)))

    def _tunnel(self, flow: http.HTTPFlow, head: RequestHead) -> None:
        ex = Exchange.open_tunnel(self.run, head, time.perf_counter_ns())
        if ex.reply is not None:
            flow.metadata[_EXCHANGE] = ex
            _answer(flow, ex.reply)

    def server_connect(self, data: ServerConnectionHookData) -> Awaitable[None] | None:
        """Regular mode: what mitmproxy connects to is what was judged.

        The head was judged by the target's name (resolved when it is a name
        on the control listener's port); mitmproxy then resolves it again to
        connect, and a DNS answer that changed in between (rebinding) would
        reach the control listener. So a connection to that port is decided
        here, on what the name resolves to now, and pinned to the address
        that was checked. Only that port pays for it: a connection elsewhere
        can never reach the listener, and keeps the system's own choice
        among a name's addresses.
        """
        control, server = self.run.control_address, data.server
        if (
            control is None
            or self.run.settings.mode != "regular"
            or server.address is None
            or server.address[1] != control[1]
        ):
            return None
        return _pin(server, control)

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        self.deadlines.watch(flow, "waiting")
        _frame_body(flow.request)
        ex: Exchange | None = flow.metadata.get(_EXCHANGE)
        if ex is None or flow.response is not None:
            return None  # already answered (no route, refused early)
        if flow.request.trailers:
            # Fields after the body: not part of what is audited, and mitmproxy
            # cannot forward them to an HTTP/1 upstream. Refuse, by name.
            _answer(flow, ex.refuse(Rejected(Rule.REQUEST_TRAILERS), time.perf_counter_ns()))
            return None
        if ex.api is None:  # passed through; a WebSocket handshake is audited once open
            self._pass_through(flow, ex)
            return None
        return self._audit(flow, ex)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        resp = flow.response
        assert resp is not None
        ex: Exchange | None = flow.metadata.get(_EXCHANGE)
        if resp.status_code == 101 or (ex is not None and ex.open_ended):
            # A WebSocket, an MCP GET stream: open until either side closes it.
            self.deadlines.stop(flow)
        else:
            self.deadlines.watch(flow, "response")
        if ex is not None:
            stream = ex.started(resp.status_code, resp.headers, time.perf_counter_ns())
            if stream is not None:
                resp.stream = stream

    def response(self, flow: http.HTTPFlow) -> None:
        expired = self.deadlines.stop(flow)
        resp = flow.response
        assert resp is not None
        if resp.trailers and not (flow.request.is_http2 or flow.request.is_http3):
            # mitmproxy cannot send trailers to an HTTP/1 client (it would crash
            # mid-exchange); they carry nothing modeltap observes.
            resp.trailers = None
        ex: Exchange | None = flow.metadata.get(_EXCHANGE)
        if ex is not None and resp.status_code == 101:
            reply = ex.switched(flow.websocket is not None, time.perf_counter_ns())
            if reply is not None:
                # Not the WebSocket modeltap follows: no tunnel, the upstream is let go.
                flow.websocket = None
                _answer(flow, reply)
                return
        if ex is not None:
            encoding = resp.headers.get("content-encoding")
            ex.ended(resp.status_code, resp.raw_content, encoding, expired, time.perf_counter_ns())

    def error(self, flow: http.HTTPFlow) -> None:
        expired = self.deadlines.stop(flow)
        _FAILURE_ANSWER.set(None)
        ex: Exchange | None = flow.metadata.get(_EXCHANGE)
        if ex is None:
            return
        kind = classify_failure(_failure_facts(flow, expired, self.options))
        complete = flow.request.timestamp_end is not None
        reply = ex.failed(kind, expired, time.perf_counter_ns(), request_complete=complete)
        if reply is not None and flow.response is None:
            _FAILURE_ANSWER.set(_assemble(reply))

    # ------------------------------------------------------------------ the request body

    def _pass_through(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        req = flow.request
        decision = ex.pass_through(
            lambda: req.get_content(strict=False) or b"", req.headers, len(req.raw_content or b"")
        )
        _apply(flow, decision)
        if ex.websocket and isinstance(decision, Forward):
            flow.metadata[VIEW_KEY] = ex.view  # the WebSocket addon opens its connection

    def _audit(self, flow: http.HTTPFlow, ex: Exchange) -> Awaitable[None] | None:
        """Hand the body to the core and do what it asks until it answers (the
        work it sends off the loop on a worker thread)."""
        req = flow.request
        raw = req.raw_content or b""
        ahead = flow.metadata.pop(request_limit.HASH_KEY, None)
        if not isinstance(ahead, request_limit.BodyHash) or ahead.content is not raw:
            ahead = None  # the digest is the body's only while the flow holds that very body
        body = RequestBody(raw, req.headers, hashed_as_it_arrived=ahead is not None)
        step = _work_here(flow.request, ex, ex.receive_body(body, time.perf_counter_ns()))
        if isinstance(step, Forward | Reply):
            _apply(flow, step)
            return None
        return self._off_loop(flow, ex, step, ahead)

    async def _off_loop(
        self,
        flow: http.HTTPFlow,
        ex: Exchange,
        step: Decode | Digest,
        ahead: request_limit.BodyHash | None,
    ) -> None:
        """Do the core's work until it answers: decoding and hashing on a worker
        thread, so other exchanges go on meanwhile."""
        loop = asyncio.get_running_loop()
        while True:
            done: WorkDone
            try:
                if isinstance(step, Digest) and step.from_arrival and ahead is not None:
                    done = Hashed(await ahead.hexdigest())  # hashed while it arrived
                else:
                    done = await loop.run_in_executor(None, step.run)
            except Exception as e:
                done = Failed(e)
            answer = _work_here(flow.request, ex, ex.resume(done, time.perf_counter_ns()))
            if isinstance(answer, Forward | Reply):
                _apply(flow, answer)
                return
            step = answer


# ---------------------------------------------------------------------- helpers


def _install() -> None:
    """Put modeltap's changes to mitmproxy's HTTP layers in place (idempotent)."""
    # mitmproxy answers an unreachable upstream with an HTML page; agents' SDKs
    # want JSON they can parse, in their provider's shape (see error_page).
    error_page.install(_error_page)
    # mitmproxy's HTTP/1 reader hangs on a trailer section (see mitm_http1).
    mitm_http1.install()
    # Request bodies are bounded by --max-body before mitmproxy has buffered
    # them (see request_limit).
    request_limit.install()


async def _resolve(host: str, port: int) -> tuple[str, ...]:
    """The addresses a name resolves to (as mitmproxy's connect would look it up);
    none when it does not resolve (then nothing can be connected to either)."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(str(info[4][0]) for info in found))


async def _pin(server: Server, control: tuple[str, int]) -> None:
    """Refuse a connection that lands on the control listener; else pin it to the
    address checked (a name keeps its name for TLS)."""
    assert server.address is not None  # server_connect checked it
    host, port = server.address[0], server.address[1]
    named = host_addresses(host)
    addresses = tuple(str(a) for a in named) if named is not None else await _resolve(host, port)
    if not addresses or is_control_address(host, port, control, addresses):
        # Killed before it connects (mitmproxy's server_connect contract).
        server.error = "modeltap: this address is the control listener's, never the proxy's"
        return
    if named is None and server.sni is None:
        server.sni = host  # TLS still names the host, not the address it was pinned to
    server.address = (addresses[0], port)


def _head(flow: http.HTTPFlow, session: str | None, signed: bool = False) -> RequestHead:
    req = flow.request
    return RequestHead(
        id=flow.id,
        # As sent: mitmproxy's req.method is upper-cased, but "post" goes upstream as "post".
        method=req.data.method.decode("utf-8", "surrogateescape"),
        target=req.path,
        scheme=req.scheme,
        host=req.host,
        port=req.port,
        headers=req.headers,
        # Header names from the raw fields: mitmproxy's headers.keys() costs ~10 us.
        fields=req.headers.fields,
        session=session,
        signed=signed,
        host_header=req.host_header,
        sni=flow.client_conn.sni,
        # mitmproxy flags a head it refuses before this hook (validate_inbound_headers).
        broken=flow.error is not None,
    )


def _answer(flow: http.HTTPFlow, reply: Reply) -> None:
    """Answer the flow with modeltap's own reply; it is never forwarded."""
    headers = {"Content-Type": "application/json", **dict(reply.headers)}
    if reply.close:
        headers["Connection"] = "close"
    flow.response = http.Response.make(reply.status, reply.body, headers)


def _work_here(
    request: http.Request, ex: Exchange, step: Forward | Reply | Work
) -> Forward | Reply | Decode | Digest:
    """Do the work the core asks of the glue itself (:class:`Reencode`) until it
    asks for work off the loop or answers. Fails closed: mitmproxy would
    forward a request whose hook raised."""
    while isinstance(step, Reencode):
        done: Reencoded | Failed
        try:
            # mitmproxy encodes it with the request's content-encoding.
            request.content = step.content
            done = Reencoded(request.raw_content or b"")
        except Exception as e:
            done = Failed(e)
        step = ex.resume(done, time.perf_counter_ns())
    return step


def _apply(flow: http.HTTPFlow, decision: Forward | Reply) -> None:
    if isinstance(decision, Reply):
        _answer(flow, decision)
        return
    for name, value in decision.headers:
        flow.request.headers[name] = value


def _assemble(reply: Reply) -> bytes:
    headers = {"Content-Type": "application/json", **dict(reply.headers), "Connection": "close"}
    data: bytes = http1.assemble_response(http.Response.make(reply.status, reply.body, headers))
    return data


def _error_page(status_code: int, message: str = "") -> bytes:
    """Replacement for mitmproxy's HTML error page (e.g. the 502 of an unreachable
    upstream): a JSON body that both the OpenAI and the Anthropic SDK parse, so the
    agent's SDK raises a clear error instead of choking on HTML. When modeltap
    itself ended the exchange (an upstream timeout), its own answer is sent."""
    answer = _FAILURE_ANSWER.get()
    if answer is not None:
        _FAILURE_ANSWER.set(None)
        return answer
    return _assemble(answers.upstream_error(status_code, message))


def _settings(settings: Settings, opts: Any, updated: set[str]) -> Settings:
    """The core's settings with the request gate's updated options.

    Raises:
        OptionsError: a bad route or size.
    """
    route_options = {"modeltap_routes", "modeltap_upstream", "modeltap_mcp", "modeltap_mcp_hosts"}
    if {"mode", "modeltap_mode", *route_options} & updated:
        listeners = [(mode.type_name, mode.data) for mode in _proxy_modes(opts)]
        try:
            # Unset, modeltap_mode follows mitmproxy's own mode (mitmdump -s).
            mode, target = modeltap_mode(opts.modeltap_mode, listeners)
        except ValueError as e:
            raise exceptions.OptionsError(str(e)) from None
        mcp = list(opts.modeltap_mcp), list(opts.modeltap_mcp_hosts)
        try:
            routes = RouteTable.build(list(opts.modeltap_routes), opts.modeltap_upstream, *mcp)
        except RouteError as e:
            raise exceptions.OptionsError(str(e)) from None
        if target is not None and not opts.modeltap_upstream:
            try:
                routes = RouteTable.build(list(opts.modeltap_routes), target, *mcp)
            except RouteError as e:
                raise exceptions.OptionsError(f"mitmproxy's --mode reverse:{target}: {e}") from None
        settings = replace(settings, routes=routes, mode=mode)
    if "modeltap_max_body" in updated:
        settings = replace(settings, max_body=_size(opts.modeltap_max_body))
    if {"modeltap_strict", "modeltap_image_detail"} & updated:
        settings = replace(
            settings, strict=opts.modeltap_strict, image_detail=opts.modeltap_image_detail
        )
    return settings


def _size(value: str) -> int:
    try:
        size = human.parse_size(value)
    except ValueError:
        size = None
    if size is None or size <= 0:
        raise exceptions.OptionsError("modeltap_max_body must be a size such as 64m")
    return size


def _proxy_modes(opts: Any) -> list[ProxyMode]:
    """mitmproxy's ``--mode`` values, parsed; a bad one is left out (mitmproxy's
    proxyserver reports it itself)."""
    modes = []
    for spec in opts.mode:
        try:
            modes.append(ProxyMode.parse(spec))
        except ValueError:
            continue
    return modes


def _refuse_open_proxy(opts: Any) -> None:
    """Refuse to start a forwarding proxy that anyone can reach (SPEC 8); warn
    of a reverse one (mitmproxy listens on every interface by default)."""
    listeners = [
        (mode.type_name, mode.listen_host(opts.listen_host), mode.listen_port(opts.listen_port))
        for mode in _proxy_modes(opts)
    ]
    for kind, host, port in listeners:
        if kind == "reverse" and not is_loopback(host):
            logger.warning(
                "modeltap: reverse proxy on %s:%s: anyone who can reach it can use its routes "
                "(with their own keys); --listen-host 127.0.0.1 keeps it to this machine",
                host or "*",
                port,
            )
    if opts.modeltap_allow_open_proxy:
        return
    open_ones = open_proxy_listeners(listeners, opts.proxyauth)
    if open_ones:
        raise exceptions.OptionsError(
            open_proxy_message(
                open_ones,
                "set listen_host=127.0.0.1, proxyauth=USER:PASS, or modeltap_allow_open_proxy=true",
            )
        )


def _failure_facts(flow: http.HTTPFlow, expired: Phase | None, opts: Any) -> FailureFacts:
    """What the flow and its connections say about whose fault the failure was."""
    message = flow.error.msg if flow.error is not None else None
    validate_headers = opts.validate_inbound_headers
    return FailureFacts(
        timed_out=expired,
        client_broke_http=message == mitm_http1.REQUEST_FRAMING_ERROR
        or _framing_refused(flow.request, None, validate_headers),
        upstream_broke_http=message == mitm_http1.RESPONSE_FRAMING_ERROR
        or (
            flow.response is not None
            and _framing_refused(flow.request, flow.response, validate_headers)
        ),
        client_closed=not (flow.client_conn.state & ConnectionState.CAN_WRITE),
        upstream_connected=flow.server_conn.timestamp_tcp_setup is not None,
    )


def _framing_refused(
    request: http.Request, response: http.Response | None, validate_headers: bool
) -> bool:
    """True if mitmproxy refuses the framing headers of the request (or, given one,
    of the response): both Content-Length and Transfer-Encoding, an invalid length
    or coding. The same checks mitmproxy ran, run again on the flow's headers."""
    try:
        if validate_headers:
            validate.validate_headers(response if response is not None else request)
        http1.expected_http_body_size(request, response)
    except ValueError:
        return True
    return False


def _frame_body(request: http.Request) -> None:
    """Give an HTTP/2 or HTTP/3 request body a Content-Length if it came without one.

    Those protocols frame bodies themselves, so the header is optional there;
    mitmproxy forwards such a request to an HTTP/1 upstream with no framing at
    all, and the upstream reads the body as the next request on the connection:
    a model request smuggled inside a pass-through body would reach it unaudited.
    The body is whole at this point (modeltap never streams requests).
    """
    if (
        (request.is_http2 or request.is_http3)
        and request.raw_content
        and "content-length" not in request.headers
        and "transfer-encoding" not in request.headers
    ):
        request.headers["content-length"] = str(len(request.raw_content))
