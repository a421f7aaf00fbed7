"""A local upstream stub that speaks the providers' real wire formats.

One aiohttp server on 127.0.0.1 (free port, background thread, stops by
itself) answers JSON, SSE and WebSocket on the same port. It records every
request exactly as it arrived (raw bytes, headers), so tests can check what
modeltap forwarded. Replies are scripted per test with :class:`Reply`, or
default to a canned answer in the API's own format.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gzip
import ipaddress
import re
import ssl
import tempfile
import threading
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import brotli
import orjson
from aiohttp import WSMsgType, web

Json = dict[str, Any]


@dataclass
class Received:
    """One request as the upstream saw it."""

    method: str
    path: str  # with query string
    headers: dict[str, str]
    raw: bytes
    #: AWS SigV4: True when the signature botocore computes from what arrived
    #: (with :data:`AWS_SECRET`) is the one the request carries, False when not
    #: (the stub then answered 403 as AWS does), None for an unsigned request.
    sigv4: bool | None = None

    def json(self) -> Any:
        data = self.raw
        enc = self.headers.get("content-encoding", "")
        if enc == "gzip":
            data = gzip.decompress(data)
        return orjson.loads(data) if data else None


@dataclass
class Reply:
    """A scripted answer.

    ``sse`` is a list of ``(event_name_or_None, data)``; data is a dict (sent as
    JSON) or a str (sent verbatim, e.g. ``[DONE]``).
    """

    status: int = 200
    json: Any = None
    sse: list[tuple[str | None, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    encoding: str | None = None  # "gzip" or "br"
    pause_after: dict[int, float] = field(default_factory=dict)
    gate_after: dict[int, threading.Event] = field(default_factory=dict)
    cut_after: int | None = None  # abort the connection after event i
    raw: bytes | None = None  # a verbatim body (e.g. invalid JSON)
    #: An AWS event stream (Bedrock): whole frames, sent one by one.
    frames: list[bytes] | None = None
    #: A streamed JSON array (Gemini without ``?alt=sse``): one write per element.
    json_array: list[Any] | None = None
    #: End SSE lines with ``\r\n`` (as Google's servers do).
    crlf: bool = False


@dataclass
class WsReceived:
    """One WebSocket client message as the upstream saw it."""

    is_text: bool
    data: bytes | str


class Upstream:
    """The stub server. Use as a context manager."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        #: Serve HTTPS with this context (see :func:`self_signed_tls`) instead of HTTP.
        self.tls = tls
        self.received: list[Received] = []
        self.replies: deque[Reply] = deque()
        self.ws_received: list[WsReceived] = []
        self.ws_handshakes: list[dict[str, str]] = []
        #: For WebSocket: a function from a response.create message to its server events.
        self.ws_script: Callable[[Json, int], list[Json]] | None = None
        #: For HTTP: answers a request (after scripted ``replies``), or None for the default.
        self.responder: Callable[[Received], Reply | None] | None = None
        self._ws_count = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Upstream:
        self._thread = threading.Thread(target=self._serve, daemon=True, name="upstream-stub")
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("upstream stub did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._loop is not None and self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            with contextlib.suppress(Exception):
                fut.result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._runner = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # auto_decompress off: tests compare the exact bytes modeltap forwarded.
        runner = web.AppRunner(app, handle_signals=False, access_log=None, auto_decompress=False)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.tls)
        loop.run_until_complete(site.start())
        self._runner = runner
        server = site._server
        assert server is not None and server.sockets  # type: ignore[union-attr]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._started.set()
        loop.run_forever()
        loop.close()

    # ------------------------------------------------------------ handlers

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("upgrade", "").lower() == "websocket":
            return await self._websocket(request)
        raw = await request.read()
        sigv4 = verify_sigv4(request, raw)
        self.received.append(
            Received(request.method, request.path_qs, dict(request.headers), raw, sigv4)
        )
        if sigv4 is False:
            return web.json_response(
                {"message": "The request signature we calculated does not match the signature."},
                status=403,
                headers={"x-amzn-ErrorType": "InvalidSignatureException"},
            )
        reply = self.replies.popleft() if self.replies else None
        if reply is None and self.responder is not None:
            reply = self.responder(self.received[-1])
        if reply is None:
            reply = self._default(request, raw)
        if reply.raw is not None:
            return web.Response(status=reply.status, body=reply.raw, headers=reply.headers)
        if reply.sse is not None or reply.json_array is not None:
            return await self._stream(request, reply)
        if reply.frames is not None:
            return await self._frames(request, reply)
        body = orjson.dumps(reply.json)
        headers = {"Content-Type": "application/json", **reply.headers}
        if reply.encoding == "gzip":
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        elif reply.encoding == "br":
            body, headers["Content-Encoding"] = brotli.compress(body), "br"
        return web.Response(status=reply.status, body=body, headers=headers)

    async def _stream(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        array = reply.json_array is not None
        content_type = "application/json; charset=UTF-8" if array else "text/event-stream"
        headers = {"Content-Type": content_type, "Cache-Control": "no-cache"}
        headers.update(reply.headers)
        compress: Callable[[bytes], bytes] = lambda b: b  # noqa: E731
        if reply.encoding == "gzip":
            z = zlib.compressobj(wbits=31)
            compress = lambda b: z.compress(b) + z.flush(zlib.Z_SYNC_FLUSH)  # noqa: E731
            headers["Content-Encoding"] = "gzip"
        elif reply.encoding == "br":
            c = brotli.Compressor()
            compress = lambda b: c.process(b) + c.flush()  # noqa: E731
            headers["Content-Encoding"] = "br"
        resp = web.StreamResponse(status=reply.status, headers=headers)
        await resp.prepare(request)
        frames = (
            json_array_frames(reply.json_array)
            if reply.json_array is not None
            else [sse_bytes(name, data, reply.crlf) for name, data in reply.sse or ()]
        )
        for i, frame in enumerate(frames):
            await resp.write(compress(frame))
            if await self._cut_or_gate(request, reply, i):
                return resp
            if i in reply.pause_after:
                await asyncio.sleep(reply.pause_after[i])
        if reply.encoding == "gzip":
            await resp.write(z.flush())
        elif reply.encoding == "br":
            await resp.write(c.finish())
        await resp.write_eof()
        return resp

    async def _frames(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        headers = {"Content-Type": "application/vnd.amazon.eventstream", **reply.headers}
        resp = web.StreamResponse(status=reply.status, headers=headers)
        await resp.prepare(request)
        assert reply.frames is not None
        for i, frame in enumerate(reply.frames):
            await resp.write(frame)
            if await self._cut_or_gate(request, reply, i):
                return resp
        await resp.write_eof()
        return resp

    @staticmethod
    async def _cut_or_gate(request: web.Request, reply: Reply, i: int) -> bool:
        """After frame ``i``: abort the connection if the reply is cut there (True),
        else wait at its gate there, if it has one (up to 10 s)."""
        if reply.cut_after == i:
            assert request.transport is not None
            request.transport.abort()
            return True
        if i in reply.gate_after:
            await asyncio.get_running_loop().run_in_executor(None, reply.gate_after[i].wait, 10)
        return False

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        self.ws_handshakes.append(dict(request.headers))
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                self.ws_received.append(WsReceived(True, msg.data))
                try:
                    obj = orjson.loads(msg.data)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and obj.get("type") == "response.create":
                    self._ws_count += 1
                    script = self.ws_script or default_ws_events
                    for event in script(obj, self._ws_count):
                        await ws.send_str(orjson.dumps(event).decode())
            elif msg.type == WSMsgType.BINARY:
                self.ws_received.append(WsReceived(False, msg.data))
            else:
                break
        return ws

    def _default(self, request: web.Request, raw: bytes) -> Reply:
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            body = {}
        stream = isinstance(body, dict) and body.get("stream") is True
        model = body.get("model", "stub-model") if isinstance(body, dict) else "stub-model"
        path = request.path
        cloud = _cloud_default(request.method, path, body)
        if cloud is not None:
            return cloud
        gemini = GEMINI_METHOD.search(path)
        if gemini is not None:
            return gemini_default(gemini, request.query.get("alt"), body)
        if path.endswith("/chat/completions"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return chat_text_sse(model, include_usage=include) if stream else chat_text_json(model)
        if path.endswith("/responses"):
            return responses_text_sse(model) if stream else responses_text_json(model)
        if path.endswith("/responses/compact"):
            return responses_compact_json(body.get("input"))
        if path.endswith("/messages"):
            return anthropic_text_sse(model) if stream else anthropic_text_json(model)
        if path.endswith("/models"):
            return Reply(json={"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        return Reply(json={"ok": True})


# ---------------------------------------------------------------- the clouds
# Bedrock Runtime and Vertex's Anthropic models, as their real clients read them
# (shapes from the offline captures in research/shapes).

#: AWS's documentation example credentials: the tests' AWS clients sign with them,
#: and the stub checks every SigV4 signature against this secret.
AWS_KEY_ID = "AKIDEXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def isolate_aws(monkeypatch: Any, tmp_path: Path) -> None:
    """No AWS configuration of the machine leaks into boto3; nothing looks for
    instance metadata; the stub's key pair is the only credential."""
    for name in ("AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)


_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request,\s*SignedHeaders=(?P<signed>[^,]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]+)"
)
_BEDROCK = re.compile(
    r"/model/(?P<model>.+)/(?P<op>converse-stream|converse|invoke-with-response-stream|invoke|"
    r"count-tokens)$"
)
_VERTEX = re.compile(r"/publishers/anthropic/models/(?P<model>[^/]+):(?P<verb>\w+)$")


def verify_sigv4(request: web.Request, body: bytes) -> bool | None:
    """Check a SigV4 signature as AWS would: recompute it with botocore from the
    request exactly as it arrived (Host, raw path, the signed headers, the body).

    Returns:
        None for a request that is not SigV4-signed; else whether it holds.
    """
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    found = _SIGV4.fullmatch(request.headers.get("Authorization", ""))
    if found is None:
        return None if not request.headers.get("Authorization", "").startswith("AWS4") else False
    signed = found["signed"].split(";")
    headers = {k: v for k, v in request.headers.items() if k.lower() in signed}
    if len(headers) != len(signed):
        return False  # a signed header did not arrive
    scheme = "https" if request.secure else "http"
    aws = AWSRequest(
        method=request.method,
        url=f"{scheme}://{request.host}{request.raw_path}",
        data=body,
        headers=headers,
    )
    aws.context["timestamp"] = request.headers.get("X-Amz-Date", "")
    credentials = Credentials(found["key"], AWS_SECRET, request.headers.get("X-Amz-Security-Token"))
    signer = SigV4Auth(credentials, found["service"], found["region"])
    expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
    return bool(expected == found["signature"])


def _cloud_default(method: str, path: str, body: Any) -> Reply | None:
    """The stub's answer on a Bedrock Runtime or Vertex path, or None for others."""
    if method == "GET" and path.rstrip("/").endswith("/inference-profiles"):
        return Reply(json={"inferenceProfileSummaries": []}, headers=_amzn())
    bedrock = _BEDROCK.search(path)
    if bedrock is not None:
        model, op = bedrock["model"], bedrock["op"]
        if op == "count-tokens":
            return Reply(json={"inputTokens": 12}, headers=_amzn())
        if op == "converse":
            return converse_text_json()
        if op == "converse-stream":
            return converse_text_stream()
        if op == "invoke":
            return bedrock_invoke_json(model)
        return bedrock_event_stream(anthropic_text_sse(model))
    vertex = _VERTEX.search(path)
    if vertex is not None:
        if vertex["model"] == "count-tokens":
            return Reply(json={"input_tokens": 12})
        stream = vertex["verb"] == "streamRawPredict" or (
            isinstance(body, dict) and body.get("stream") is True
        )
        model = vertex["model"].split("@", 1)[0]
        return anthropic_text_sse(model) if stream else anthropic_text_json(model)
    return None


def bedrock_invoke_json(model: str) -> Reply:
    """InvokeModel: the Anthropic message, Bedrock's metrics in its headers."""
    reply = anthropic_text_json(model)
    reply.headers = _amzn(
        {
            "X-Amzn-Bedrock-Invocation-Latency": "412",
            "X-Amzn-Bedrock-Input-Token-Count": "25",
            "X-Amzn-Bedrock-Output-Token-Count": "7",
        }
    )
    return reply


def _amzn(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"x-amzn-RequestId": "4c1e2b3a-5d6f-4a7b-8c9d-0e1f2a3b4c5d", **(extra or {})}


def converse_text_json() -> Reply:
    return Reply(
        json={
            "output": {
                "message": {"role": "assistant", "content": [{"text": "Hello from the stub."}]}
            },
            "stopReason": "end_turn",
            "usage": {
                "inputTokens": 25,
                "outputTokens": 7,
                "totalTokens": 42,
                "cacheReadInputTokens": 10,
                "cacheWriteInputTokens": 0,
            },
            "metrics": {"latencyMs": 321},
        },
        headers=_amzn(),
    )


def converse_text_stream() -> Reply:
    from tests.eventstream_frames import event

    def frame(name: str, data: Json) -> bytes:
        return event(name, orjson.dumps({**data, "p": "abcdef"}))

    return Reply(
        frames=[
            frame("messageStart", {"role": "assistant"}),
            frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hello"}}),
            frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " there"}}),
            frame("contentBlockStop", {"contentBlockIndex": 0}),
            frame("messageStop", {"stopReason": "end_turn"}),
            frame(
                "metadata",
                {
                    "usage": {
                        "inputTokens": 25,
                        "outputTokens": 2,
                        "totalTokens": 27,
                        "cacheReadInputTokens": 0,
                        "cacheWriteInputTokens": 0,
                    },
                    "metrics": {"latencyMs": 280},
                },
            ),
        ],
        headers=_amzn(),
    )


def converse_tool_stream(name: str = "lookup") -> Reply:
    """A ConverseStream asking for one tool, its input in the two fragments of TOOL_ARGUMENTS."""
    from tests.eventstream_frames import event

    def frame(event_type: str, data: Json) -> bytes:
        return event(event_type, orjson.dumps(data))

    half = len(TOOL_ARGUMENTS) // 2
    start = {"toolUse": {"toolUseId": "tooluse_lookup1", "name": name}}
    return Reply(
        frames=[
            frame("messageStart", {"role": "assistant"}),
            frame("contentBlockStart", {"contentBlockIndex": 0, "start": start}),
            *(
                frame(
                    "contentBlockDelta",
                    {"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}},
                )
                for piece in (TOOL_ARGUMENTS[:half], TOOL_ARGUMENTS[half:])
            ),
            frame("contentBlockStop", {"contentBlockIndex": 0}),
            frame("messageStop", {"stopReason": "tool_use"}),
            frame(
                "metadata", {"usage": {"inputTokens": 40, "outputTokens": 12, "totalTokens": 52}}
            ),
        ],
        headers=_amzn(),
    )


def bedrock_event_stream(anthropic: Reply) -> Reply:
    """InvokeModelWithResponseStream: each Anthropic event of ``anthropic`` in a
    ``chunk`` frame, Bedrock's invocation metrics on ``message_stop``."""
    from tests.eventstream_frames import chunk

    assert anthropic.sse is not None
    frames = []
    for _, data in anthropic.sse:
        if data.get("type") == "ping":
            continue  # Bedrock sends none
        if data.get("type") == "message_stop":
            data = {
                **data,
                "amazon-bedrock-invocationMetrics": {
                    "inputTokenCount": 25,
                    "outputTokenCount": 12,
                    "invocationLatency": 640,
                    "firstByteLatency": 210,
                },
            }
        frames.append(chunk(data, pad=5))
    return Reply(frames=frames, headers=_amzn({"X-Amzn-Bedrock-Content-Type": "application/json"}))


def self_signed_tls() -> ssl.SSLContext:
    """A server TLS context for 127.0.0.1 with a throwaway self-signed certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = f"{tmp}/cert.pem", f"{tmp}/key.pem"
        with open(cert_path, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(key_path, "wb") as f:
            f.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_path, key_path)
    return context


def sse_bytes(name: str | None, data: Any, crlf: bool = False) -> bytes:
    """One SSE event on the wire."""
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    head = f"event: {name}\n" if name else ""
    event = f"{head}data: {payload}\n\n"
    return (event.replace("\n", "\r\n") if crlf else event).encode()


def json_array_frames(items: list[Any]) -> list[bytes]:
    """A streamed JSON array as Google's servers write it: ``[``, pretty-printed
    elements with ``\r\n,`` between them, ``]``; one write per element."""
    frames = [
        (b"[" if i == 0 else b"\r\n,") + orjson.dumps(item, option=orjson.OPT_INDENT_2)
        for i, item in enumerate(items)
    ]
    return [*frames, b"]"] if frames else [b"[]"]


# ---------------------------------------------------------------- canned answers
# Shapes follow the providers' documented wire formats.


def chat_text_json(model: str, text: str = "Hello from the stub.") -> Reply:
    return Reply(
        json={
            "id": "chatcmpl-stub1",
            "object": "chat.completion",
            "created": 1760000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": 21,
                "completion_tokens": 5,
                "total_tokens": 26,
                "prompt_tokens_details": {"cached_tokens": 3},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )


def chat_delta_chunk(
    model: str, delta: Json, finish: str | None = None, response_id: str = "chatcmpl-stub2"
) -> Json:
    """One chat completion chunk as the API streams it: ``delta`` and ``finish``
    as its choice's."""
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": 1760000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def chat_chunk(content: str | None, finish: str | None = None, model: str = "gpt-5") -> Json:
    """A chat chunk (id ``c``) for a scripted stream: ``content`` as its delta
    (``None``: an empty delta) and ``finish`` as its finish reason."""
    delta = {} if content is None else {"content": content}
    return chat_delta_chunk(model, delta, finish, response_id="c")


def chat_text_sse(model: str, include_usage: bool = False) -> Reply:
    events: list[tuple[str | None, Any]] = [
        (None, chat_delta_chunk(model, {"role": "assistant", "content": ""})),
        (None, chat_delta_chunk(model, {"content": "Hello"})),
        (None, chat_delta_chunk(model, {"content": " there"})),
        (None, chat_delta_chunk(model, {}, "stop")),
    ]
    if include_usage:
        events.append(
            (
                None,
                {
                    "id": "chatcmpl-stub2",
                    "object": "chat.completion.chunk",
                    "created": 1760000000,
                    "model": model,
                    "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
                },
            )
        )
    events.append((None, "[DONE]"))
    return Reply(sse=events)


def responses_text_json(model: str) -> Reply:
    return Reply(json=_response_object(model, "completed", [_message_item("Hello from the stub.")]))


def responses_compact_json(sent: Any) -> Reply:
    """A ``response.compaction`` object (``POST /v1/responses/compact``): the
    user messages sent, then one encrypted ``compaction`` item; no model, no status."""
    items = sent if isinstance(sent, list) else [{"role": "user", "content": sent or ""}]
    kept = [
        {"type": "message", "role": "user", "content": item.get("content")}
        for item in items
        if isinstance(item, dict) and item.get("role") == "user"
    ]
    compaction = {"id": "cmp_stub1", "type": "compaction", "encrypted_content": "gAAAA-stub"}
    return Reply(
        json={
            "id": "resp_cmp_stub1",
            "object": "response.compaction",
            "created_at": 1760000000,
            "output": [*kept, compaction],
            "usage": {
                "input_tokens": 900,
                "input_tokens_details": {"cached_tokens": 512},
                "output_tokens": 120,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 1020,
            },
        }
    )


def _message_item(text: str) -> Json:
    return {
        "id": "msg_stub1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _response_object(model: str, status: str, output: list[Json], usage: bool = True) -> Json:
    return {
        "id": "resp_stub1",
        "object": "response",
        "created_at": 1760000000,
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": (
            {
                "input_tokens": 30,
                "input_tokens_details": {"cached_tokens": 4},
                "output_tokens": 6,
                "output_tokens_details": {"reasoning_tokens": 2},
                "total_tokens": 36,
            }
            if usage
            else None
        ),
    }


def responses_text_sse(model: str) -> Reply:
    done = _response_object(model, "completed", [_message_item("Hello")])
    created = dict(_response_object(model, "in_progress", []), usage=None)
    return Reply(
        sse=[
            (
                "response.created",
                {"type": "response.created", "sequence_number": 0, "response": created},
            ),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "sequence_number": 1,
                    "item_id": "msg_stub1",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": "Hello",
                },
            ),
            (
                "response.completed",
                {"type": "response.completed", "sequence_number": 2, "response": done},
            ),
        ]
    )


def anthropic_text_json(model: str) -> Reply:
    return Reply(
        json={
            "id": "msg_stub1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": "Hello from the stub."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 25,
                "output_tokens": 7,
                "cache_read_input_tokens": 10,
                "cache_creation_input_tokens": 5,
            },
        }
    )


def anthropic_text_sse(model: str) -> Reply:
    return Reply(
        sse=[
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_stub2",
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {
                            "input_tokens": 25,
                            "output_tokens": 1,
                            "cache_read_input_tokens": 10,
                            "cache_creation_input_tokens": 0,
                        },
                    },
                },
            ),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            ("ping", {"type": "ping"}),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "Hello"},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 12},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def default_ws_events(message: Json, n: int) -> list[Json]:
    """Server events for one ``response.create`` over WebSocket."""
    model = message.get("model") or "stub-model"
    rid = f"resp_ws{n}"
    done = dict(_response_object(model, "completed", [_message_item("Hi")]), id=rid)
    created = dict(_response_object(model, "in_progress", []), id=rid, usage=None)
    return [
        {"type": "response.created", "sequence_number": 0, "response": created},
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_stub1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
        },
        {"type": "response.completed", "sequence_number": 2, "response": done},
    ]


def ws_lookup_call(n: int) -> Json:
    """A WebSocket turn's completed ``lookup`` call item (ids ``fc_{n}``, ``call_{n}``)."""
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": "lookup",
        "arguments": "{}",
        "status": "completed",
    }


def ws_completed(n: int, output: list[Json]) -> Json:
    """A WebSocket turn's ``response.completed`` (``resp_{n}``, one token in and out)."""
    done = {
        "id": f"resp_{n}",
        "object": "response",
        "status": "completed",
        "model": "gpt-5",
        "output": output,
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }
    return {"type": "response.completed", "response": done}


# ---------------------------------------------------------------- canned tool calls
# The model asks for one client tool: ``lookup`` with these arguments. Streams
# split the arguments over several deltas, as the providers do.

TOOL_ARGUMENTS = '{"q": "weather", "n": 3}'
TOOL_ARGUMENT_PARTS = ('{"q": ', '"weather"', ', "n": ', "3}")


#: The usage ``chat_tool_json`` reports unless a test gives its own.
CHAT_TOOL_USAGE: Json = {
    "prompt_tokens": 40,
    "completion_tokens": 12,
    "total_tokens": 52,
    "prompt_tokens_details": {"cached_tokens": 8},
    "completion_tokens_details": {"reasoning_tokens": 4},
}


def chat_tool_json(
    model: str,
    *,
    name: str = "lookup",
    arguments: str = TOOL_ARGUMENTS,
    call_id: str = "call_lookup1",
    response_id: str = "chatcmpl-tool1",
    usage: Json = CHAT_TOOL_USAGE,
) -> Reply:
    """A chat completion that asks for one tool call (as the API sends it)."""
    return Reply(
        json={
            "id": response_id,
            "object": "chat.completion",
            "created": 1760000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "refusal": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": arguments},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
    )


def _chat_tool_chunk(model: str, delta: Json, finish: str | None = None) -> Json:
    return dict(chat_delta_chunk(model, delta, finish), id="chatcmpl-tool2")


def chat_tool_sse(model: str, include_usage: bool = False) -> Reply:
    first = {
        "index": 0,
        "id": "call_lookup2",
        "type": "function",
        "function": {"name": "lookup", "arguments": ""},
    }
    events: list[tuple[str | None, Any]] = [
        (None, _chat_tool_chunk(model, {"role": "assistant", "content": None})),
        (None, _chat_tool_chunk(model, {"tool_calls": [first]})),
    ]
    for part in TOOL_ARGUMENT_PARTS:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
        events.append((None, _chat_tool_chunk(model, delta)))
    events.append((None, _chat_tool_chunk(model, {}, "tool_calls")))
    if include_usage:
        events.append(
            (
                None,
                {
                    "id": "chatcmpl-tool2",
                    "object": "chat.completion.chunk",
                    "created": 1760000000,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 40,
                        "completion_tokens": 12,
                        "total_tokens": 52,
                        "prompt_tokens_details": {"cached_tokens": 8},
                        "completion_tokens_details": {"reasoning_tokens": 4},
                    },
                },
            )
        )
    events.append((None, "[DONE]"))
    return Reply(sse=events)


def _function_call_item(arguments: str, status: str = "completed") -> Json:
    return {
        "id": "fc_stub1",
        "type": "function_call",
        "status": status,
        "call_id": "call_lookup3",
        "name": "lookup",
        "arguments": arguments,
    }


def responses_tool_json(model: str) -> Reply:
    return Reply(json=_response_object(model, "completed", [_function_call_item(TOOL_ARGUMENTS)]))


def responses_tool_sse(model: str) -> Reply:
    done = _response_object(model, "completed", [_function_call_item(TOOL_ARGUMENTS)])
    created = dict(_response_object(model, "in_progress", []), usage=None)
    events: list[tuple[str | None, Any]] = [
        (
            "response.created",
            {"type": "response.created", "sequence_number": 0, "response": created},
        ),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": 1,
                "output_index": 0,
                "item": _function_call_item("", "in_progress"),
            },
        ),
    ]
    for part in TOOL_ARGUMENT_PARTS:
        events.append(
            (
                "response.function_call_arguments.delta",
                {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": len(events),
                    "item_id": "fc_stub1",
                    "output_index": 0,
                    "delta": part,
                },
            )
        )
    events += [
        (
            "response.function_call_arguments.done",
            {
                "type": "response.function_call_arguments.done",
                "sequence_number": len(events),
                "item_id": "fc_stub1",
                "output_index": 0,
                "arguments": TOOL_ARGUMENTS,
            },
        ),
        (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "sequence_number": len(events) + 1,
                "output_index": 0,
                "item": _function_call_item(TOOL_ARGUMENTS),
            },
        ),
        (
            "response.completed",
            {"type": "response.completed", "sequence_number": len(events) + 2, "response": done},
        ),
    ]
    return Reply(sse=events)


def anthropic_tool_json(model: str) -> Reply:
    return Reply(
        json={
            "id": "msg_tool1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [
                {"type": "text", "text": "Looking it up."},
                {
                    "type": "tool_use",
                    "id": "toolu_lookup1",
                    "name": "lookup",
                    "input": {"q": "weather", "n": 3},
                },
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 50,
                "output_tokens": 20,
                "cache_read_input_tokens": 30,
                "cache_creation_input_tokens": 6,
            },
        }
    )


def anthropic_tool_sse(model: str) -> Reply:
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_tool2",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 50,
                        "output_tokens": 1,
                        "cache_read_input_tokens": 30,
                        "cache_creation_input_tokens": 6,
                    },
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_lookup2",
                    "name": "lookup",
                    "input": {},
                },
            },
        ),
        # The API's first input delta is empty.
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            },
        ),
    ]
    for part in TOOL_ARGUMENT_PARTS:
        events.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                },
            )
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Reply(sse=events)


# ---------------------------------------------------------------- Gemini
# generateContent answers: JSON, SSE (``?alt=sse``) and the streamed JSON
# array; Code Assist (``/v1internal:…``) wraps each as {response, traceId}.

#: ``{resource}:{method}`` at the end of a decoded path.
GEMINI_METHOD = re.compile(r"(?:models/(?P<model>[^/:]+)|/v1internal):(?P<method>\w+)$")
GEMINI_USAGE = {
    "promptTokenCount": 31,
    "candidatesTokenCount": 6,
    "thoughtsTokenCount": 4,
    "cachedContentTokenCount": 8,
    "totalTokenCount": 41,
}


def gemini_chunk(
    model: str,
    parts: list[Json],
    finish: str | None = None,
    usage: Json | None = None,
    response_id: str = "resp-gem1",
) -> Json:
    """One ``GenerateContentResponse`` (a whole response, or one chunk of a stream)."""
    candidate: Json = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    chunk: Json = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
    chunk["usageMetadata"] = usage or {"promptTokenCount": 31, "totalTokenCount": 31}
    return chunk


def gemini_text_chunks(model: str, text: str = "Hello from Gemini.") -> list[Json]:
    """A thought, then the text in two pieces; usage on every chunk, complete on the last."""
    return [
        gemini_chunk(model, [{"text": "Thinking it over.", "thought": True}]),
        gemini_chunk(model, [{"text": text[:6]}]),
        gemini_chunk(
            model, [{"text": text[6:], "thoughtSignature": "c2lnLTE="}], "STOP", GEMINI_USAGE
        ),
    ]


def gemini_reply(chunks: list[Json], method: str, alt: str | None, code_assist: bool) -> Reply:
    """``chunks`` answered as the method and ``alt`` ask: the last one whole (JSON),
    SSE, or the streamed JSON array."""
    if method != "streamGenerateContent":
        # A whole response: every chunk's parts in one candidate, the last usage.
        whole = dict(chunks[-1])
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        whole["candidates"] = [
            {**chunks[-1]["candidates"][0], "content": {"role": "model", "parts": parts}}
        ]
        return Reply(json={"response": whole, "traceId": "trace-stub"} if code_assist else whole)
    if code_assist:
        chunks = [{"response": chunk, "traceId": "trace-stub"} for chunk in chunks]
    if alt == "sse":
        return Reply(sse=[(None, chunk) for chunk in chunks], crlf=True)
    return Reply(json_array=chunks)


def gemini_default(found: re.Match[str], alt: str | None, body: Any) -> Reply:
    method = found["method"]
    code_assist = found["model"] is None
    request = body.get("request", {}) if code_assist and isinstance(body, dict) else body
    if method == "countTokens":
        return Reply(json={"totalTokens": 12})
    if method not in ("generateContent", "streamGenerateContent"):
        return Reply(json={})  # loadCodeAssist, retrieveUserQuota, listExperiments
    model = (body.get("model") if code_assist and isinstance(body, dict) else found["model"]) or "m"
    config = request.get("generationConfig") if isinstance(request, dict) else None
    if isinstance(config, dict) and config.get("responseMimeType") == "application/json":
        return gemini_reply(
            [gemini_chunk(model, [{"text": '{"ok": true}'}], "STOP", GEMINI_USAGE)],
            method,
            alt,
            code_assist,
        )
    return gemini_reply(gemini_text_chunks(model), method, alt, code_assist)


def gemini_function_call_chunks(model: str, calls: list[Json]) -> list[Json]:
    """The model asks for ``calls`` (``functionCall`` objects, ids as given)."""
    first, *rest = calls
    parts: list[Json] = [{"functionCall": first, "thoughtSignature": "c2lnLWNhbGw="}]
    parts += [{"functionCall": call} for call in rest]
    return [
        gemini_chunk(model, [{"text": "I need a tool.", "thought": True}]),
        gemini_chunk(model, parts, "STOP", GEMINI_USAGE),
    ]
