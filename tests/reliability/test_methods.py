"""Methods other than POST on model endpoints (SPEC 2, "No way around the audit").

A model endpoint takes its body by POST, and only a POST is audited; every
other method passed through unaudited. A server that routes on the path
alone (a Go ``http.HandleFunc`` without a method check, a plain Node
handler) runs a PUT, a GET with a body or a method it does not know as the
model request its body is; and mitmproxy reports ``post`` as ``POST`` while
forwarding ``post``, so the record claimed a POST the upstream never got.
Sent on raw sockets to a real ``modeltap run`` process; the upstream records
every request line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import read_jsonl
from tests.reliability.faults import RawUpstream
from tests.reliability.test_processes import ProxyProcess
from tests.reliability.test_request_gate import CHAT_BYTES, LineRecorder, send


@pytest.fixture
def raw_proc(
    tmp_path: Path, processes: list[ProxyProcess]
) -> Iterator[tuple[ProxyProcess, LineRecorder]]:
    recorder = LineRecorder()
    with RawUpstream(recorder) as raw:
        proc = ProxyProcess("--out", str(tmp_path), "--route", f"raw={raw.url}", "-q")
        processes.append(proc)
        yield proc, recorder


WITH_A_BODY = [
    ("PUT", "/raw/v1/chat/completions"),
    ("PATCH", "/raw/v1/responses"),
    ("GET", "/raw/v1/chat/completions"),
    ("DELETE", "/raw/v1/messages"),
    ("OPTIONS", "/raw/v1/messages?beta=true"),
    ("SEARCH", "/raw/v1/responses"),
    ("post", "/raw/v1/chat/completions"),
    ("Post", "/raw/v1/messages"),
]


def test_model_requests_by_another_method_are_refused(
    raw_proc: tuple[ProxyProcess, LineRecorder], tmp_path: Path
) -> None:
    """Before: all 8 reached the upstream (6 unaudited, the 2 spelt in lower case
    audited as the POST they were not)."""
    proc, upstream = raw_proc
    for method, target in WITH_A_BODY:
        status, body = send(proc.port, method, target, CHAT_BYTES)
        assert status == 400 and b"method_override" in body, method
    assert upstream.lines == []
    assert not (tmp_path / "audit.jsonl").exists()
    rejected = [e for e in read_jsonl(tmp_path / "events.jsonl") if e["kind"] == "rejected"]
    assert [e["rule"] for e in rejected] == ["method_override"] * len(WITH_A_BODY)


def test_other_methods_without_a_body_still_pass(
    raw_proc: tuple[ProxyProcess, LineRecorder], tmp_path: Path
) -> None:
    """Listing stored completions, a HEAD probe, a CORS preflight: unaudited, as before."""
    proc, upstream = raw_proc
    for method, target in [
        ("GET", "/raw/v1/chat/completions?limit=2"),
        ("HEAD", "/raw/v1/messages"),
        ("OPTIONS", "/raw/v1/responses"),
        ("POST", "/raw/v1/chat/completions"),
    ]:
        body = CHAT_BYTES if method == "POST" else b""
        status, _ = send(proc.port, method, target, body)
        assert status == 200, method
    assert [line.split(b" ")[0] for line in upstream.lines] == [
        b"GET",
        b"HEAD",
        b"OPTIONS",
        b"POST",
    ]
    (record,) = read_jsonl(tmp_path / "audit.jsonl")
    assert record["api"] == "openai.chat_completions"
