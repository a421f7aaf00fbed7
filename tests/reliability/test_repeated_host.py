"""Regular mode: the provider named in a second ``Host`` field (SPEC 2, issue 17's class).

modeltap decides a regular-mode request's provider on every name it goes
by; mitmproxy joins repeated ``Host`` fields with a comma, so a provider in
the second field was no name modeltap knew, and the request went to the
upstream as ``unaudited``: servers that keep the first or the last field
route it to the provider. Through a TLS tunnel to an address, as an agent
behind ``HTTPS_PROXY`` would send it.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import orjson

from modeltap.app.proxy import Proxy
from tests.conftest import read_jsonl
from tests.reliability.faults import read_until_closed
from tests.reliability.test_cloud_wires_gate import GEMINI, MODEL, forward  # noqa: F401
from tests.upstream import Upstream

GOOGLE = "generativelanguage.googleapis.com"


def test_a_provider_in_any_host_field_is_audited(
    forward: tuple[Proxy, Upstream, Upstream],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: both forwarded as `unaudited` (the stub refuses duplicate Host
    fields with 400; a first- or last-wins server runs the model)."""
    proxy, _, tls = forward
    body = orjson.dumps(GEMINI)
    path = f"/v1beta/models/{MODEL}:generateContent"
    for hosts in ([f"127.0.0.1:{tls.port}", GOOGLE], [GOOGLE, f"127.0.0.1:{tls.port}"]):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            sock.sendall(f"CONNECT 127.0.0.1:{tls.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            with context.wrap_socket(sock) as tunnel:
                fields = "".join(f"Host: {host}\r\n" for host in hosts)
                tunnel.sendall(
                    f"POST {path} HTTP/1.1\r\n{fields}Content-Type: application/json\r\n"
                    f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                read_until_closed(tunnel)
    audit = read_jsonl(tmp_path / "out" / "audit.jsonl")
    assert [(r["api"], r["provider"]) for r in audit] == [
        ("gemini.generate_content", "gcp.gemini")
    ] * 2
    events = read_jsonl(tmp_path / "out" / "events.jsonl")
    assert [e for e in events if e["kind"] == "unaudited"] == []
