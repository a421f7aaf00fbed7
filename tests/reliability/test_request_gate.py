"""The request gate, tried as an attacker would (SPEC 2, "No way around the audit").

Encoded endpoint paths, paths that servers read differently, content codings
outside HTTP's, compression bombs over HTTP and WebSocket, and duplicate keys:
each driven through the real proxy over real sockets, checking what the
upstream received (byte for byte, or nothing at all) and what was written.
Figures (time, RSS, latency of a concurrent request) go to
``$MODELTAP_RELIABILITY_FIGURES``; nothing here asserts on a timing.
"""

from __future__ import annotations

import gzip
import socket
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import brotli
import httpx2 as httpx
import openai
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import Running, read_jsonl
from tests.reliability.faults import RawUpstream, figure, read_request, wait_until, ws_frame
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream, default_ws_events

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

KEY = "sk-test-PLANTED-SECRET-0123456789"
CHAT = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
CHAT_BYTES = orjson.dumps(CHAT)
ANSWER = (
    b'{"id":"chatcmpl-raw","object":"chat.completion","model":"gpt-5","choices":'
    b'[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
)
MB = 1024 * 1024


# ---------------------------------------------------------------- helpers


class LineRecorder:
    """A raw upstream script: keeps each request line exactly as it arrived."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.bodies: list[bytes] = []

    def __call__(self, conn: socket.socket) -> None:
        data = read_request(conn)
        if not data:
            return
        head, _, body = data.partition(b"\r\n\r\n")
        self.lines.append(head.split(b"\r\n", 1)[0])
        self.bodies.append(body)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(ANSWER)
            + ANSWER
        )


@pytest.fixture
def raw_route(start_proxy: Callable[..., Running]) -> Iterator[tuple[Running, LineRecorder]]:
    """A proxy with the route ``/raw`` on a raw-socket upstream that records request lines."""
    recorder = LineRecorder()
    with RawUpstream(recorder) as raw:
        yield start_proxy(routes=[f"raw={raw.url}"]), recorder


def send(
    port: int,
    method: str,
    target: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """One request on a fresh socket, the target sent exactly as given."""
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
        head += f"{name}: {value}\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def rules(running: Running) -> list[str]:
    return [e["rule"] for e in running.events("rejected")]


# ---------------------------------------------------------------- 1. paths

ENCODED_ENDPOINTS = [
    ("/v1/chat%2Fcompletions", "openai.chat_completions"),
    ("/v1/chat%2fcompletions", "openai.chat_completions"),
    ("/v1/respons%65s", "openai.responses"),
    ("/v1/%72esponses", "openai.responses"),
    ("/v1/messag%65s?beta=true", "anthropic.messages"),
    ("/v1/Chat/Completions", "openai.chat_completions"),
    ("/v1/MESSAGES", "anthropic.messages"),
    ("/v1/chat/completions/", "openai.chat_completions"),
    ("/v1/chat%2Fcompletions%2F", "openai.chat_completions"),
]


@pytest.mark.parametrize(("target", "api"), ENCODED_ENDPOINTS)
def test_encoded_endpoint_is_audited_and_forwarded_byte_for_byte(
    raw_route: tuple[Running, LineRecorder], target: str, api: str
) -> None:
    running, upstream = raw_route
    status, _ = send(running.proxy.port, "POST", "/raw" + target, CHAT_BYTES)
    assert status == 200
    assert upstream.lines == [f"POST {target} HTTP/1.1".encode()]
    (record,) = running.audit()
    assert record["api"] == api and record["model"] == "gpt-5"
    assert record["path"] == target


@pytest.mark.parametrize(
    ("target", "api", "written"),
    [
        ("/v1/chat;x=1/completions", "openai.chat_completions", "/v1/chat;x=REDACTED/completions"),
        ("/v1/chat/completions;jsessionid=1", "openai.chat_completions",
         "/v1/chat/completions;jsessionid=REDACTED"),
        ("/v1/respons%65s;v=2", "openai.responses", "/v1/respons%65s;v=REDACTED"),
    ],
)  # fmt: skip
def test_path_parameters_are_read_as_servlet_containers_read_them(
    raw_route: tuple[Running, LineRecorder], target: str, api: str, written: str
) -> None:
    """Tomcat, Jetty and Spring drop ';params' before routing: audited as the endpoint
    they reach there, forwarded byte for byte, the parameter's value not written."""
    running, upstream = raw_route
    status, _ = send(running.proxy.port, "POST", "/raw" + target, CHAT_BYTES)
    assert status == 200
    assert upstream.lines == [f"POST {target} HTTP/1.1".encode()]
    (record,) = running.audit()
    assert record["api"] == api and record["path"] == written


@pytest.mark.parametrize("target", ["/v1/chat%2Fcompletions", "/v1/respons%65s", "/v1/messag%65s"])
def test_encoded_endpoint_with_a_bad_body_is_refused_like_a_model_request(
    raw_route: tuple[Running, LineRecorder], target: str
) -> None:
    running, upstream = raw_route
    status, body = send(running.proxy.port, "POST", "/raw" + target, b'{"messages": []}')
    assert status == 400 and b"missing_model" in body
    assert upstream.lines == [] and running.audit() == []
    assert rules(running) == ["missing_model"]


def test_openai_sdk_custom_path_with_an_encoded_slash_is_audited(running: Running) -> None:
    """An agent using the SDK's raw `post` on an encoded path: audited, not unaudited."""
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key=KEY, max_retries=0)
    resp = client.post("/chat%2Fcompletions", cast_to=httpx.Response, body=CHAT)
    assert resp.status_code == 200
    (record,) = running.audit()
    assert record["api"] == "openai.chat_completions"
    assert running.upstream.received[0].headers.get("Authorization") == f"Bearer {KEY}"
    assert running.events("unaudited") == []


BEDROCK_LIKE = [
    "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic"
    ".claude-sonnet-4-20250514-v1%3A0/invoke",
    "/model/us.anthropic.claude-sonnet-4-20250514-v1%3a0/converse-stream",
    "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke",
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4%4020250514"
    ":streamRawPredict",
]


#: What each of those paths takes: Converse's own body, else an Anthropic body without model.
CONVERSE_BYTES = orjson.dumps({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})
CLOUD_MESSAGES_BYTES = orjson.dumps(
    {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1, "messages": []}
)


@pytest.mark.parametrize("target", BEDROCK_LIKE)
def test_signed_style_paths_are_forwarded_byte_for_byte(
    raw_route: tuple[Running, LineRecorder], target: str
) -> None:
    """SigV4 signs the path as sent: %3A, %3a, %2F and %40 reach the upstream unchanged."""
    running, upstream = raw_route
    body = CONVERSE_BYTES if "/converse" in target else CLOUD_MESSAGES_BYTES
    status, _ = send(running.proxy.port, "POST", "/raw" + target, body)
    assert status == 200
    assert upstream.lines == [f"POST {target} HTTP/1.1".encode()]
    (record,) = running.audit()
    assert record["model_source"] == "path"


NONCANONICAL = [
    ("/v1/../v1/chat/completions", "dot segment"),
    ("/v1/./chat/completions", "dot segment"),
    ("/v1/x/%2e%2e/chat/completions", "dot segment"),
    ("/v1/x/.%2E/chat/completions", "dot segment"),
    ("/v1/x%2F..%2Fchat/completions", "dot segment"),
    ("/v1/chat/completions.", "dot segment"),
    ("/v1//chat/completions", "empty segment"),
    ("/v1/%2Fchat/completions", "empty segment"),
    ("/v1/chat/completions//", "empty segment"),
    ("/v1/chat%252Fcompletions", "double encoding"),
    ("/v1/respons%2565s", "double encoding"),
    ("/v1/chat/completions%25", "double encoding"),
    ("/v1/chat/completions%", "malformed percent-escape"),
    ("/v1/chat/completions%2", "malformed percent-escape"),
    ("/v1/chat%zzcompletions", "malformed percent-escape"),
    ("/v1/%u002e%u002e/chat/completions", "malformed percent-escape"),
    ("/v1/x/..;/chat/completions", "dot segment"),
    ("/v1/x/..%3Bjsessionid=1/chat/completions", "encoded semicolon"),
    ("/v1/chat/completions%3bx=1", "encoded semicolon"),
    ("/v1/;x/chat/completions", "empty segment"),
    ("/v1/chat\\completions", "backslash"),
    ("/v1/chat%5Ccompletions", "backslash"),
    ("/v1/chat/completions%00", "control character"),
    ("/v1/chat/completions%0A", "control character"),
    ("/v1/chat/completions%09", "control character"),
    ("/v1/chat/compl%C3%A9tions", "non-ASCII character"),
    ("/v1/chat%EF%BC%8Fcompletions", "non-ASCII character"),
    ("/v1/chat%C0%AFcompletions", "non-ASCII character"),
    ("/v1/chat/completions%20", "character not allowed in a path"),
    ("/v1/chat/completions%3Fx=1", "character not allowed in a path"),
    ("/v1/chat/completions%23x", "character not allowed in a path"),
    ("/v1/chat/completions#x", "character not allowed in a path"),
]


@pytest.mark.parametrize(("target", "detail"), NONCANONICAL)
@pytest.mark.parametrize("method", ["POST", "GET"])
def test_noncanonical_paths_are_refused_before_forwarding(
    raw_route: tuple[Running, LineRecorder], target: str, detail: str, method: str
) -> None:
    running, upstream = raw_route
    status, body = send(running.proxy.port, method, "/raw" + target, CHAT_BYTES)
    assert status == 400
    assert b"noncanonical_path" in body and detail.encode() in body
    assert upstream.lines == [] and running.audit() == []
    (event,) = running.events("rejected")
    assert event["rule"] == "noncanonical_path"
    # The refusal never quotes the path it refused.
    assert b"completions" not in body


def test_noncanonical_path_refused_on_a_provider_host_in_regular_mode(
    start_proxy: Callable[..., Running], upstream: Upstream
) -> None:
    running = start_proxy(mode="regular")
    proxy = f"http://127.0.0.1:{running.proxy.port}"
    with httpx.Client(proxy=proxy, timeout=10) as client:
        ok = client.post(upstream.url + "/v1/chat%2Fcompletions", content=CHAT_BYTES)
        bad = client.post(upstream.url + "/v1/x/%2e%2e/chat/completions", content=CHAT_BYTES)
    assert ok.status_code == 200 and bad.status_code == 400
    assert [r["api"] for r in running.audit()] == ["openai.chat_completions"]
    assert [r.path for r in upstream.received] == ["/v1/chat%2Fcompletions"]
    assert rules(running) == ["noncanonical_path"]


@pytest.mark.parametrize(
    ("method", "target", "headers"),
    [
        ("GET", "/v1/chat/completions", {"X-HTTP-Method-Override": "POST"}),
        ("PUT", "/v1/responses", {"x-http-method": "POST"}),
        ("GET", "/v1/messages", {"X-Method-Override": "POST"}),
        ("GET", "/v1/chat/completions?_method=POST", {}),
        ("GET", "/v1/chat%2Fcompletions?%5Fmethod=post", {}),
    ],
)
def test_method_override_on_a_model_endpoint_is_refused(
    raw_route: tuple[Running, LineRecorder],
    method: str,
    target: str,
    headers: dict[str, str],
) -> None:
    """Google's APIs, Rails and Express middleware read these as a POST."""
    running, upstream = raw_route
    status, body = send(running.proxy.port, method, "/raw" + target, CHAT_BYTES, headers)
    assert status == 400 and b"method_override" in body
    assert upstream.lines == []


@pytest.mark.parametrize("header", ["X-Original-URL", "x-rewrite-url"])
@pytest.mark.parametrize("target", ["/v1/files", "/v1/chat/completions"])
def test_path_override_headers_are_refused(
    raw_route: tuple[Running, LineRecorder], header: str, target: str
) -> None:
    """IIS and older Symfony route on these instead of the request line."""
    running, upstream = raw_route
    headers = {header: "/v1/chat/completions"}
    status, body = send(running.proxy.port, "POST", "/raw" + target, CHAT_BYTES, headers)
    assert status == 400 and b"noncanonical_path" in body and b"path override header" in body
    assert upstream.lines == []


def test_plain_get_on_a_model_endpoint_still_passes(
    raw_route: tuple[Running, LineRecorder],
) -> None:
    """`GET /v1/chat/completions` lists stored completions: passed through, unaudited."""
    running, upstream = raw_route
    status, _ = send(running.proxy.port, "GET", "/raw/v1/chat/completions?limit=2")
    assert status == 200
    assert upstream.lines == [b"GET /v1/chat/completions?limit=2 HTTP/1.1"]
    assert running.audit() == [] and len(running.events("unaudited")) == 1


def test_websocket_handshake_to_an_encoded_responses_path_is_audited(running: Running) -> None:
    url = running.base().replace("http://", "ws://") + "/v1/respons%65s"
    create = {"type": "response.create", "model": "gpt-5", "input": "hi"}
    with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(orjson.dumps(create).decode())
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
            pass
    (record,) = running.audit()
    assert record["transport"] == "websocket" and record["path"] == "/v1/respons%65s"
    assert len(running.upstream.ws_received) == 1


@pytest.mark.parametrize(
    ("target", "rule"),
    [
        ("/v1/chat%2Fcompletions", "ws_unsupported_endpoint"),
        ("/v1/messag%65s", "ws_unsupported_endpoint"),
        ("/v1/x/%2e%2e/responses", "noncanonical_path"),
    ],
)
def test_websocket_handshake_that_cannot_be_audited_is_refused(
    raw_route: tuple[Running, LineRecorder], target: str, rule: str
) -> None:
    running, upstream = raw_route
    headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    status, body = send(running.proxy.port, "GET", "/raw" + target, b"", headers)
    assert status == 400 and rule.encode() in body
    assert upstream.lines == []


# ---------------------------------------------------------------- 2. content codings


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


ACCEPTED_CODINGS: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("GZip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", raw_deflate),
    ("br", brotli.compress),
    ("zstd", zstd.compress),
    ("identity", lambda b: b),
    ("gzip, br", lambda b: brotli.compress(gzip.compress(b))),
    ("zstd,identity, , gzip", lambda b: gzip.compress(zstd.compress(b))),
]


@pytest.mark.parametrize(
    ("coding", "encode"),
    ACCEPTED_CODINGS,
    ids=[f"{c}-{i}" for i, (c, _) in enumerate(ACCEPTED_CODINGS)],
)
def test_http_codings_are_decoded_for_the_audit_and_forwarded_unchanged(
    raw_route: tuple[Running, LineRecorder], coding: str, encode: Callable[[bytes], bytes]
) -> None:
    running, upstream = raw_route
    body = encode(CHAT_BYTES)
    status, _ = send(
        running.proxy.port, "POST", "/raw/v1/chat/completions", body, {"Content-Encoding": coding}
    )
    assert status == 200
    assert upstream.bodies == [body]
    (record,) = running.audit()
    assert record["model"] == "gpt-5" and record["body_bytes"] == len(body)


REFUSED_CODINGS: list[tuple[str, bytes]] = [
    # Each decodes, with Python's codecs, to a body naming another model.
    ("base64", b"eyJtb2RlbCI6Im90aGVyIiwibWVzc2FnZXMiOltdfQ=="),
    (
        "quoted-printable",
        b'{"model":"gpt-5","messages":[],"x":"=\n"}',
    ),
    ("bz2", __import__("bz2").compress(CHAT_BYTES)),
    ("gzip, base64", gzip.compress(CHAT_BYTES)),
    ("compress", CHAT_BYTES),
    ("x-modeltap-made-up", CHAT_BYTES),
    ("gzip;q=1", gzip.compress(CHAT_BYTES)),
    ("utf-8", CHAT_BYTES),
]


@pytest.mark.parametrize(("coding", "body"), REFUSED_CODINGS, ids=[c for c, _ in REFUSED_CODINGS])
def test_other_codings_are_refused(
    raw_route: tuple[Running, LineRecorder], coding: str, body: bytes
) -> None:
    running, upstream = raw_route
    status, answer = send(
        running.proxy.port, "POST", "/raw/v1/chat/completions", body, {"Content-Encoding": coding}
    )
    assert status == 400 and b"undecodable_content_encoding" in answer
    assert upstream.lines == [] and running.audit() == []


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        # Cut before its trailer; mtime=0: the test id (made of the bytes) is the same
        # in every process, as pytest-xdist needs.
        ("gzip", gzip.compress(CHAT_BYTES, mtime=0)[:-6]),
        ("gzip", b"\x1f\x8b not gzip at all"),
        ("br", brotli.compress(CHAT_BYTES)[:-2]),
        ("zstd", zstd.compress(CHAT_BYTES)[:-3]),
        ("deflate", b"\x78\x9c"),
    ],
)
def test_corrupt_or_truncated_coded_bodies_are_refused(
    raw_route: tuple[Running, LineRecorder], coding: str, body: bytes
) -> None:
    running, upstream = raw_route
    status, answer = send(
        running.proxy.port, "POST", "/raw/v1/chat/completions", body, {"Content-Encoding": coding}
    )
    assert status == 400 and b"undecodable_content_encoding" in answer
    assert upstream.lines == []


def chunked_request(port: int, transfer_encoding: str, body: bytes) -> tuple[int, bytes]:
    """POST a chunked body with the given Transfer-Encoding, on a raw socket."""
    head = (
        "POST /raw/v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: {transfer_encoding}\r\n\r\n"
    )
    chunks = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + chunks)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split()[1]), data.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("transfer_encoding", ["gzip, chunked", "deflate,chunked"])
def test_transfer_codings_other_than_chunked_are_refused(
    raw_route: tuple[Running, LineRecorder], transfer_encoding: str
) -> None:
    """mitmproxy forwards `deflate, chunked` as it came: an upstream honouring it would
    inflate a body that was audited as sent."""
    running, upstream = raw_route
    status, body = chunked_request(running.proxy.port, transfer_encoding, CHAT_BYTES)
    assert status == 400 and b"undecodable_content_encoding" in body
    assert upstream.lines == [] and running.audit() == []


def test_plain_chunked_body_is_audited(raw_route: tuple[Running, LineRecorder]) -> None:
    running, upstream = raw_route
    status, _ = chunked_request(running.proxy.port, "Chunked", CHAT_BYTES)
    assert status == 200 and len(upstream.lines) == 1 and len(running.audit()) == 1


# ---------------------------------------------------------------- 3. bombs


def gzip_bomb(inflated: int) -> bytes:
    """gzip members of 64 MiB of zeros back to back (RFC 1952 allows several)."""
    member = gzip.compress(b"\0" * (64 * MB), 9)
    return member * (inflated // (64 * MB))


def deflate_segments(inflated: int) -> bytes:
    """A raw deflate stream of ``inflated`` zeros, ending on a sync-flush marker."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = c.compress(b"\0" * (64 * MB)) + c.flush(zlib.Z_FULL_FLUSH)
    return segment * (inflated // (64 * MB))


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    return values


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux: clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def small_latencies(url: str, stop: threading.Event, out: list[float]) -> None:
    """Small chat requests back to back until ``stop``; each one's latency in ms."""
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            t = time.perf_counter()
            assert client.post(url, content=CHAT_BYTES).status_code == 200
            out.append((time.perf_counter() - t) * 1000)


def measure_bomb(
    proc: ProxyProcess, fire: Callable[[], Any], small_url: str
) -> tuple[Any, dict[str, float]]:
    """Fire a bomb at a proxy process while small requests run; return its answer
    and the figures: seconds to the refusal, peak RSS growth, worst small latency."""
    pid = proc.proc.pid
    latencies: list[float] = []
    stop = threading.Event()
    worker = threading.Thread(target=small_latencies, args=(small_url, stop, latencies))
    worker.start()
    wait_until(lambda: len(latencies) >= 20)
    reset_peak(pid)
    before = proc_status(pid)["VmRSS"]
    during_from = len(latencies)
    t = time.perf_counter()
    answer = fire()
    elapsed = time.perf_counter() - t
    peak = proc_status(pid)["VmHWM"]
    during_to = len(latencies)
    stop.set()
    worker.join(30)
    during = latencies[during_from : during_to + 1] or latencies[-1:]
    return answer, {
        "refused_in_s": round(elapsed, 3),
        "rss_growth_mb": round((peak - before) / MB, 1),
        "small_requests_during": len(during),
        "small_max_ms": round(max(during), 1),
    }


@pytest.fixture
def bomb_proxy(tmp_path: Path, upstream: Upstream) -> Iterator[Callable[..., ProxyProcess]]:
    started: list[ProxyProcess] = []

    def start(*args: str) -> ProxyProcess:
        p = ProxyProcess(
            "--out", str(tmp_path / f"out{len(started)}"), "--route", f"stub={upstream.url}",
            "-q", *args,
        )  # fmt: skip
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


def test_gzip_bomb_is_refused_at_max_body(
    tmp_path: Path, upstream: Upstream, bomb_proxy: Callable[..., ProxyProcess]
) -> None:
    """5.2 MB of gzip that inflates to 5 GiB, at the default --max-body (64 MiB)."""
    bomb = gzip_bomb(5 * 1024 * MB)
    proc = bomb_proxy()
    url = proc.url + "/stub/v1/chat/completions"

    def fire() -> tuple[int, bytes]:
        return send(
            proc.port, "POST", "/stub/v1/chat/completions", bomb, {"Content-Encoding": "gzip"}
        )

    (status, body), figures = measure_bomb(proc, fire, url)
    assert status == 413 and b"body_too_large" in body
    assert figures["rss_growth_mb"] < 64 + 64  # --max-body (default 64 MiB) + 64 MiB
    assert all(r.path == "/v1/chat/completions" and len(r.raw) < 1000 for r in upstream.received)
    assert proc.stop() == 0
    audit = read_jsonl(tmp_path / "out0" / "audit.jsonl")
    events = read_jsonl(tmp_path / "out0" / "events.jsonl")
    assert len(audit) == len(upstream.received)  # only the small ones, each with its line
    assert [e["rule"] for e in events if e["kind"] == "rejected"] == ["body_too_large"]
    figure("gzip_bomb", compressed_mb=round(len(bomb) / 1e6, 1), inflates_gib=5, lines_lost=0,
           **figures)  # fmt: skip


@pytest.fixture(scope="module")
def small_limit_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """One proxy process with --max-body 8m for the coding bombs (RSS is its own)."""
    out = tmp_path_factory.mktemp("bombs")
    with Upstream() as stub:
        proc = ProxyProcess("--out", str(out), "--route", f"stub={stub.url}", "-q",
                            "--max-body", "8m")  # fmt: skip
        try:
            yield proc
        finally:
            proc.kill()


@pytest.mark.parametrize(
    ("coding", "make"),
    [
        ("deflate", lambda n: deflate_segments(n) + b"\x03\x00"),
        ("br", lambda n: brotli.compress(b"\0" * n, quality=1)),
        ("zstd", lambda n: zstd.compress(b"\0" * n)),
        ("gzip, gzip", lambda n: gzip.compress(gzip_bomb(n), 1)),
        ("zstd, br, gzip", lambda n: gzip.compress(brotli.compress(zstd.compress(b"\0" * n)))),
    ],
    ids=["deflate", "br", "zstd", "gzip-gzip", "zstd-br-gzip"],
)
def test_every_coding_is_bounded(
    small_limit_proxy: ProxyProcess, coding: str, make: Callable[[int], bytes]
) -> None:
    """Each coding (and stacks of them) stops at --max-body 8m: a 256 MiB bomb is 413,
    and the proxy's peak RSS grows by less than the limit plus 64 MiB."""
    proc = small_limit_proxy
    bomb = make(256 * MB)
    reset_peak(proc.proc.pid)
    before = proc_status(proc.proc.pid)["VmRSS"]
    t = time.perf_counter()
    status, body = send(
        proc.port, "POST", "/stub/v1/chat/completions", bomb, {"Content-Encoding": coding}
    )
    elapsed = time.perf_counter() - t
    growth = proc_status(proc.proc.pid)["VmHWM"] - before
    assert status == 413 and b"body_too_large" in body
    assert growth < 8 * MB + 64 * MB
    figure("coding_bomb", coding=coding, compressed_kb=round(len(bomb) / 1e3, 1),
           inflates_mib=256, max_body_mib=8, refused_in_s=round(elapsed, 3),
           rss_growth_mb=round(growth / MB, 1))  # fmt: skip


def test_body_just_under_the_limit_decodes(start_proxy: Callable[..., Running]) -> None:
    """The bound is on the decoded size, exactly: at the limit passes, one byte more is 413."""
    running = start_proxy(max_body="64k")
    pad = 64 * 1024 - len(CHAT_BYTES) - len(b',"pad":""')
    at_limit = CHAT_BYTES[:-1] + b',"pad":"' + b"x" * pad + b'"}'
    assert len(at_limit) == 64 * 1024
    status, _ = send(running.proxy.port, "POST", "/stub/v1/chat/completions",
                     gzip.compress(at_limit), {"Content-Encoding": "gzip"})  # fmt: skip
    assert status == 200
    over = at_limit[:-2] + b'x"}'
    status, _ = send(running.proxy.port, "POST", "/stub/v1/chat/completions",
                     gzip.compress(over), {"Content-Encoding": "gzip"})  # fmt: skip
    assert status == 413
    assert len(running.audit()) == 1


# WebSocket: a raw client, so the frames are exactly the attack's.


def ws_open(port: int, path: str, deflate: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if deflate else ""
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    assert (b"permessage-deflate" in head.lower()) == deflate
    return sock


def ws_read_close(sock: socket.socket) -> int | None:
    """Read server frames until a close frame; return its code (None if the socket ends)."""
    buf = b""
    while True:
        while len(buf) < 2:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buf += chunk
        opcode, n, off = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if n == 126:
            n, off = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            n, off = struct.unpack("!Q", buf[2:10])[0], 10
        while len(buf) < off + n:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buf += chunk
        payload, buf = buf[off : off + n], buf[off + n :]
        if opcode == 8:
            return int(struct.unpack("!H", payload[:2])[0]) if len(payload) >= 2 else None


def test_websocket_deflate_bomb_is_stopped_with_1009(
    tmp_path: Path, upstream: Upstream, bomb_proxy: Callable[..., ProxyProcess]
) -> None:
    """One 1 MB permessage-deflate frame that inflates to 1 GiB, at the default --max-body."""
    proc = bomb_proxy()
    head = b'{"type":"response.create","model":"gpt-5","input":"'
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    payload = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) + deflate_segments(1024 * MB)
    payload = payload[:-4]  # permessage-deflate drops the sync-flush tail

    def fire() -> int | None:
        sock = ws_open(proc.port, "/stub/v1/responses", deflate=True)
        with sock:
            sock.sendall(ws_frame(payload, rsv1=True))
            return ws_read_close(sock)

    code, figures = measure_bomb(proc, fire, proc.url + "/stub/v1/chat/completions")
    assert code == 1009
    assert figures["rss_growth_mb"] < 64 + 64
    assert upstream.ws_received == []
    assert proc.stop() == 0
    events = read_jsonl(tmp_path / "out0" / "events.jsonl")
    assert [e["rule"] for e in events if e["kind"] == "rejected"] == ["body_too_large"]
    (closed,) = [e for e in events if e["kind"] == "ws_close"]
    assert closed["code"] == 1009
    figure("ws_deflate_bomb", frame_mb=round(len(payload) / 1e6, 2), inflates_gib=1,
           lines_lost=0, **figures)  # fmt: skip


@pytest.mark.parametrize("deflate", [True, False], ids=["deflate", "plain"])
def test_websocket_message_over_max_body_in_many_frames_is_stopped(
    start_proxy: Callable[..., Running], deflate: bool
) -> None:
    """A message of 64 KiB frames, each small, together past --max-body 1m: close 1009;
    one just under it is audited."""
    running = start_proxy(max_body="1m")
    body = b'{"type":"response.create","model":"gpt-5","input":"' + b"x" * (1024 * 1024) + b'"}'
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    frames = []
    for i in range(0, len(body), 65536):
        part = body[i : i + 65536]
        last = i + 65536 >= len(body)
        data = c.compress(part) + c.flush(zlib.Z_SYNC_FLUSH) if deflate else part
        if deflate and last:
            data = data[:-4]
        frames.append(ws_frame(data, opcode=1 if i == 0 else 0, fin=last, rsv1=deflate and i == 0))
    with ws_open(running.proxy.port, "/stub/v1/responses", deflate) as sock:
        sock.sendall(b"".join(frames))
        assert ws_read_close(sock) == 1009
    assert running.upstream.ws_received == [] and running.audit() == []
    assert wait_until(lambda: rules(running)) == ["body_too_large"]


def test_websocket_message_under_max_body_passes_with_deflate(
    start_proxy: Callable[..., Running],
) -> None:
    running = start_proxy(max_body="1m")
    body = orjson.dumps(
        {"type": "response.create", "model": "gpt-5", "input": "y" * (1024 * 1024 - 100)}
    )
    assert len(body) < 1024 * 1024
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    with ws_open(running.proxy.port, "/stub/v1/responses", True) as sock:
        sock.sendall(ws_frame((c.compress(body) + c.flush(zlib.Z_SYNC_FLUSH))[:-4], rsv1=True))
        assert wait_until(lambda: running.upstream.ws_received)
    (record,) = running.audit()
    assert record["model"] == "gpt-5" and record["body_bytes"] == len(body)


def test_websocket_server_message_over_max_body_ends_the_connection(
    start_proxy: Callable[..., Running],
) -> None:
    """An upstream event past --max-body is not relayed either: close 1009, the
    response is recorded as incomplete, and the proxy goes on serving."""
    running = start_proxy(max_body="1m")

    def huge(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
        first = default_ws_events(message, n)[0]
        return [first, {"type": "response.output_text.delta", "delta": "z" * (2 * MB)}]

    running.upstream.ws_script = huge
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    create = {"type": "response.create", "model": "gpt-5", "input": "hi"}
    with connect(url, max_size=None) as ws:
        ws.send(orjson.dumps(create).decode())
        assert orjson.loads(ws.recv(timeout=10))["type"] == "response.created"
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    (response,) = wait_until(lambda: running.events("response"))
    assert response["evidence_complete"] is False
    assert rules(running) == []  # the client broke no rule
    status, _ = send(running.proxy.port, "POST", "/stub/v1/chat/completions", CHAT_BYTES)
    assert status == 200


# ---------------------------------------------------------------- 4. duplicate keys

DUPLICATES = [
    b'{"model":"gpt-5","model":"other","messages":[]}',
    b'{"model":"gpt-5","messages":[],"mod\\u0065l":"other"}',
    b'{"model":"gpt-5","messages":[{"role":"user","content":"x","role":"system"}]}',
    b'{"model":"gpt-5","messages":[{"role":"user","content":[{"type":"text","text":"a:b",'
    b'"text":"c"}]}]}',
    b'{"model":"gpt-5","messages":[],"tools":[{"type":"function","function":{"name":"a",'
    b'"parameters":{"type":"object","properties":{"q":{},"q":{}}}}}]}',
    b'{"model":"gpt-5","messages":[],"metadata":{"k\\u003a":1,"k:":2,"k\\u003a":3}}',
]


@pytest.mark.parametrize("raw", DUPLICATES)
def test_duplicate_keys_anywhere_are_refused(
    raw_route: tuple[Running, LineRecorder], raw: bytes
) -> None:
    running, upstream = raw_route
    status, body = send(running.proxy.port, "POST", "/raw/v1/chat/completions", raw)
    assert status == 400 and b"duplicate_key" in body
    assert upstream.lines == [] and running.audit() == []
    assert rules(running) == ["duplicate_key"]


def test_duplicate_key_in_a_compressed_anthropic_body_is_refused(
    raw_route: tuple[Running, LineRecorder],
) -> None:
    running, upstream = raw_route
    raw = b'{"model":"claude-x","max_tokens":5,"messages":[],"system":"a","system":"b"}'
    status, body = send(running.proxy.port, "POST", "/raw/v1/messages", gzip.compress(raw),
                        {"Content-Encoding": "gzip"})  # fmt: skip
    assert status == 400 and b"duplicate_key" in body and b'"type":"error"' in body
    assert upstream.lines == []


def test_same_key_in_different_objects_is_not_a_duplicate(
    raw_route: tuple[Running, LineRecorder],
) -> None:
    running, upstream = raw_route
    raw = orjson.dumps(
        {
            "model": "gpt-5",
            "messages": [
                {"role": "system", "content": "a: b"},
                {"role": "user", "content": [{"type": "text", "text": '{"x": 1, "x": 2}'}]},
            ],
            "metadata": {"role": "\\u003a"},
        }
    )
    status, _ = send(running.proxy.port, "POST", "/raw/v1/chat/completions", raw)
    assert status == 200 and len(running.audit()) == 1
    assert upstream.bodies == [raw]


@pytest.mark.parametrize(
    "message",
    [
        b'{"type":"response.create","model":"gpt-5","model":"other","input":"x"}',
        b'{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":"x",'
        b'"role":"developer"}]}',
        # Read here as a control message; a first-wins server would run it.
        b'{"type":"response.create","model":"gpt-5","input":"x","type":"response.processed"}',
    ],
)
def test_websocket_duplicate_keys_are_refused_with_the_error_event(
    running: Running, message: bytes
) -> None:
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    with connect(url) as ws:
        ws.send(message.decode())
        event = orjson.loads(ws.recv(timeout=10))
        assert event["type"] == "error" and "duplicate_key" in event["error"]["message"]
        # The connection stays usable.
        ws.send(orjson.dumps({"type": "response.create", "model": "gpt-5", "input": "ok"}).decode())
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
            pass
    assert len(running.upstream.ws_received) == 1
    assert [r["model"] for r in running.audit()] == ["gpt-5"]
    assert rules(running) == ["duplicate_key"]
