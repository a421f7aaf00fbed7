"""Query-string secrets (SPEC 8): of a query only names are kept, values only
for ``api-version``, ``beta`` and ``alt``, whatever the spelling or encoding.

A real ``modeltap run`` process with ``--record`` and ``--otlp``; requests carry
a planted secret as the value of every parameter spelling we could find (and
some nobody uses), percent- and plus-encoded, value-less, as the name itself,
after ``;``, repeated, in a fragment, and in the path's ``;`` parameters. Every
place a path is written is then scanned: audit, events and sessions lines,
stderr (one line per exchange, not quiet), spans, the recording.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import quote

import httpx2 as httpx
import orjson
from websockets.sync.client import connect

from tests.otlp_receiver import HttpReceiver
from tests.reliability.faults import closed_port, figure
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream

KEY = "PLANTEDq7Zx0secret"
CHAT = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}

#: Names services put credentials under (AWS and GCS presigned URLs, Azure SAS
#: and APIM, OAuth, Gemini, generic), and spellings no list would guess.
SPELLINGS = [
    "key",
    "KEY",
    "Key",
    "api_key",
    "api-key",
    "apikey",
    "apiKey",
    "x-api-key",
    "access_token",
    "accessToken",
    "token",
    "id_token",
    "refresh_token",
    "auth",
    "authorization",
    "sig",
    "signature",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Signature",
    "X-Goog-Credential",
    "subscription-key",
    "Ocp-Apim-Subscription-Key",
    "client_secret",
    "code",
    "password",
    "passwd",
    "pwd",
    "secret",
    "jwt",
    "session",
    "sv",
    "se",
    "sp",
    "key[]",
    "key[0]",
    "creds[token]",
    "bearer",
    "q",
    "user",
    "zz_unheard_of",
]


def queries() -> list[str]:
    """Query strings, each a handful of parameters, that together try every shape."""
    out = []
    names = (
        SPELLINGS
        + [quote(n, safe="") for n in SPELLINGS]
        + [f"%{ord(n[0]):02X}{n[1:]}" for n in SPELLINGS]
    )
    for start in range(0, len(names), 8):
        out.append(
            "&".join(f"{n}={KEY}{start + i}" for i, n in enumerate(names[start : start + 8]))
        )
    out += [
        f"api-version=2024-10-21&key={quote(KEY + '/+=&?', safe='')}",
        f"api-version={KEY}&beta={KEY}&alt={KEY}",  # allowlisted names, secret values
        f"beta=true;sig={KEY};se={KEY}",  # ; separators
        f"{KEY}",  # a value-less parameter
        f"sk-{KEY}0123=1",  # the secret as the name
        f"key={KEY}&key={KEY}x&key=",  # repeated
        f"alt=sse&key={KEY}+{KEY}%20{KEY}",  # plus and percent encoded
    ]
    return out


def test_no_query_secret_reaches_any_written_place(tmp_path: Path, upstream: Upstream) -> None:
    out, rec = tmp_path / "out", tmp_path / "rec"
    started = time.perf_counter()
    with HttpReceiver() as receiver:
        p = ProxyProcess(
            "--out", str(out), "--record", str(rec), "--otlp", receiver.endpoint,
            "--route", f"stub={upstream.url}", "--route", f"dead=http://127.0.0.1:{closed_port()}",
        )  # fmt: skip
        try:
            sent = 0
            with httpx.Client(timeout=10) as client:
                for query in queries():
                    for path in (
                        f"/stub/v1/chat/completions?{query}",
                        f"/stub/v1;jsessionid={KEY}/chat/completions?{query}",
                    ):
                        # Audited, refused, unaudited and failed exchanges all write a path.
                        assert client.post(p.url + path, json=CHAT).status_code == 200
                        assert client.post(p.url + path, json={"model": ""}).status_code == 400
                        sent += 2
                    assert client.get(f"{p.url}/stub/v1/models?{query}").status_code == 200
                    dead = f"{p.url}/dead/v1/chat/completions?{query}"
                    assert client.post(dead, json=CHAT).status_code == 502
                    sent += 2
            # A fragment in the request target (clients strip it; a raw one does not).
            raw = f"POST /stub/v1/chat/completions?beta=true#key={KEY} HTTP/1.1\r\n".encode()
            body = orjson.dumps(CHAT)
            with socket.create_connection(("127.0.0.1", p.port), timeout=10) as conn:
                conn.sendall(
                    raw
                    + b"Host: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                answer = b""
                while chunk := conn.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 ")
            sent += 1
            ws_url = p.url.replace("http://", "ws://") + f"/stub/v1/responses?{queries()[0]}"
            with connect(ws_url, open_timeout=10) as ws:
                ws.send(
                    orjson.dumps({"type": "response.create", "model": "m", "input": "x"}).decode()
                )
                while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
                    pass
            assert p.stop() == 0
        finally:
            p.kill()
        spans = receiver.wait_for(sent // 2, timeout=10)
    # The secrets were planted for real: the upstream received them, byte for byte.
    assert sum(KEY in r.path for r in upstream.received) >= len(queries())
    places = {f.name: f.read_bytes() for d in (out, rec) for f in d.iterdir() if f.is_file()}
    assert {"audit.jsonl", "events.jsonl", "sessions.jsonl", "recording.jsonl"} <= set(places)
    places["stderr"] = p.stderr
    places["spans"] = repr(spans).encode()
    leaks = {
        name: data.count(KEY.encode()) for name, data in places.items() if KEY.encode() in data
    }
    assert leaks == {}
    audit = [orjson.loads(line) for line in places["audit.jsonl"].splitlines()]
    # Every audited path named a secret, but the fragment one (dropped whole).
    assert [r["path"] for r in audit if "REDACTED" not in r["path"]] == [
        "/v1/chat/completions?beta=true"
    ]
    # Allowlisted values in their harmless shapes survive; names are kept.
    assert any("api-version=2024-10-21&key=REDACTED" in r["path"] for r in audit)
    assert any("X-Amz-Signature=REDACTED" in r["path"] for r in audit)
    kinds = {orjson.loads(line)["kind"] for line in places["events.jsonl"].splitlines()}
    assert {"response", "rejected", "unaudited", "error", "ws_open"} <= kinds
    figure(
        "query_secrets",
        spellings=len(SPELLINGS) * 3,
        queries=len(queries()),
        requests=sent + 1,
        audit_lines=len(audit),
        spans=len(spans),
        places=len(places),
        leaks=0,
        seconds=round(time.perf_counter() - started, 1),
    )
