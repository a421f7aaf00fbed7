"""The control API belongs to the harness: an agent cannot end, reset or reopen a session.

Attacks through the proxy port (reverse mode, `--upstream` mounted at `/`, regular
mode, with and without the run's token), on the control listener itself (no token,
a wrong one, malformed HTTP, oversized heads and bodies), and what an ended session
does with the requests that still come (HTTP, WebSocket messages and handshakes).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import orjson
import pytest
from websockets.sync.client import connect

from modeltap.app import control
from modeltap.evidence.capture import Capture
from modeltap.evidence.records import NO_REQUESTS_MESSAGE
from modeltap.report import check
from tests.cli_process import cli_main
from tests.conftest import Running, read_jsonl
from tests.reliability.faults import figure
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream, ws_completed, ws_lookup_call

CHAT: Any = [{"role": "user", "content": "x"}]
CREATE = {
    "type": "response.create",
    "model": "gpt-5",
    "instructions": "i",
    "tools": [],
    "input": [],
}


def session_lines(out: Path, session: str) -> list[dict[str, Any]]:
    return [s for s in read_jsonl(out / "sessions.jsonl") if s["session_id"] == session]


def rejected_rules(running: Running, session: str) -> list[str]:
    return [e["rule"] for e in running.events("rejected") if e["session_id"] == session]


def endpoint(out: Path) -> control.Endpoint:
    (found,) = control.endpoints(out)
    return found


def refuse_then_try_to_erase(
    running: Running, client: openai.OpenAI, post: Callable[[str, dict[str, str]], httpx.Response]
) -> list[httpx.Response]:
    """Session `victim` under --fail-closed: one request forwarded, one refused, then
    every way we know to end the session through the proxy port, then one more request."""
    headers = {"x-modeltap-session": "victim"}
    client.chat.completions.create(model="gpt-5", messages=CHAT, extra_headers=headers)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="", messages=CHAT, extra_headers=headers)
    token = endpoint(running.out).token
    answers = [
        post("/__modeltap/sessions/victim/end", headers),
        post("/__modeltap/sessions/victim/end?reset=1", headers),
        post("/%5F%5Fmodeltap/sessions/victim/end", headers),
        post("/__modeltap/sessions/victim/end", {**headers, "authorization": f"Bearer {token}"}),
        post("/__modeltap/sessions/victim/end", {}),  # as the run's own session
        post("/__modeltap", headers),
    ]
    # The refusal stands: the next model request is still refused (fail-closed).
    with pytest.raises(openai.BadRequestError, match="fail_closed"):
        client.chat.completions.create(model="gpt-5", messages=CHAT, extra_headers=headers)
    return answers


def assert_refusal_stands(
    running: Running, answers: list[httpx.Response], forwarded: int, name: str
) -> None:
    for answer in answers:
        if "%5F" in str(answer.request.url):
            # Refused whichever rule sees it first (an encoded path may be refused
            # as non-canonical before it is recognised): never forwarded either way.
            assert answer.status_code in (400, 403) and "[rule " in answer.text
            continue
        assert answer.status_code == 403, answer.text
        assert "control_not_on_proxy_port" in answer.text
        assert "modeltap session end" in answer.text  # says where the control API lives
    # Nothing of it reached the upstream: only the first model request did.
    assert [r.path for r in running.upstream.received] == ["/v1/chat/completions"] * forwarded
    assert not (running.out / "sessions.jsonl").exists()  # no session was ended
    running.proxy.stop()
    (line,) = session_lines(running.out, "victim")
    assert line["stop_reason"] == "request_audit_error"
    assert line["evidence_complete"] is False
    assert check.problems(Capture.load(running.out), "victim")["victim"]
    assert assert_check_fails(running.out, "victim")
    figure(
        f"proxy_port_attacks_{name}",
        attempts=len(answers),
        refused=sum(a.status_code in (400, 403) for a in answers),
        reached_upstream=len(running.upstream.received) - forwarded,
        sessions_ended=0,
    )


def assert_check_fails(out: Path, session: str) -> bool:
    result = cli_main("check", str(out), "--session", session)
    assert result.returncode == 1, result.stdout
    assert f"FAIL session {session}" in result.stdout
    return True


@pytest.mark.parametrize("mounted_at_root", [False, True], ids=["routes", "upstream-at-root"])
def test_agent_cannot_end_a_session_through_the_proxy_port(
    start_proxy: Callable[..., Running], upstream: Upstream, mounted_at_root: bool
) -> None:
    running = start_proxy(fail_closed=True, upstream=upstream.url if mounted_at_root else None)
    base = running.url if mounted_at_root else running.base()
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)

    def post(path: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(running.url + path, headers=headers)

    answers = refuse_then_try_to_erase(running, client, post)
    rules = rejected_rules(running, "victim")
    assert (rules[0], rules[-1], len(rules)) == ("missing_model", "fail_closed", 7)
    assert rules.count("control_not_on_proxy_port") >= 4  # the encoded one may be non-canonical
    assert_refusal_stands(
        running, answers, forwarded=1, name="upstream_at_root" if mounted_at_root else "routes"
    )


def test_agent_cannot_end_a_session_in_regular_mode(
    start_proxy: Callable[..., Running], upstream: Upstream
) -> None:
    """As a forward proxy: the control path on an audited host, and the control
    listener itself as the target (with the token, by request and by CONNECT)."""
    running = start_proxy(fail_closed=True, mode="regular")
    proxied = httpx.Client(proxy=running.url)
    client = openai.OpenAI(
        base_url=upstream.url + "/v1", api_key="k", http_client=proxied, max_retries=0
    )

    def post(path: str, headers: dict[str, str]) -> httpx.Response:
        return proxied.post(upstream.url + path, headers=headers)

    answers = refuse_then_try_to_erase(running, client, post)
    ctl = endpoint(running.out)
    port = int(ctl.url.rsplit(":", 1)[1])
    auth = {"authorization": f"Bearer {ctl.token}", "x-modeltap-session": "victim"}
    for host in ("127.0.0.1", "localhost", "0.0.0.0", "127.0.0.2", "x.localhost"):
        answers.append(proxied.post(f"http://{host}:{port}/sessions/victim/end", headers=auth))
    # A CONNECT tunnel to the control listener is refused before it opens.
    with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=10) as raw:
        raw.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert raw.recv(200).startswith(b"HTTP/1.1 403")
    assert_refusal_stands(running, answers, forwarded=1, name="regular")


def test_control_listener_needs_the_token(running: Running) -> None:
    ctl = endpoint(running.out)
    assert ctl.url.startswith("http://127.0.0.1:")  # loopback by default
    assert (ctl.file.stat().st_mode & 0o777) == 0o600  # the token is its owner's only
    openai.OpenAI(
        base_url=running.base() + "/v1", api_key="k", max_retries=0
    ).chat.completions.create(
        model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "s"}
    )
    end = ctl.url + "/sessions/s/end"
    attempts = {
        "no token": httpx.post(end),
        "wrong token": httpx.post(end, headers={"authorization": "Bearer " + "A" * 43}),
        "token prefix": httpx.post(end, headers={"authorization": f"Bearer {ctl.token[:-1]}"}),
        "token as basic": httpx.post(end, headers={"authorization": f"Basic {ctl.token}"}),
        # What a web page could send (a browser reaches 127.0.0.1): no token, so nothing.
        "cross-site form": httpx.post(
            end, headers={"origin": "https://evil.example"}, data={"a": "b"}
        ),
    }
    for name, answer in attempts.items():
        assert answer.status_code == 401, name
        assert answer.headers["www-authenticate"] == "Bearer"
    auth = {"authorization": f"Bearer {ctl.token}"}
    assert httpx.get(end, headers=auth).status_code == 405
    assert httpx.post(ctl.url + "/sessions/s/reset", headers=auth).status_code == 404
    assert httpx.post(ctl.url + "/sessions//end", headers=auth).status_code == 404
    too_big = httpx.post(end, headers=auth, content=b"x" * (control.MAX_BODY + 1))
    assert too_big.status_code == 413
    # Malformed HTTP and a head past the bound: an error, the listener keeps serving.
    host, port = ctl.url.removeprefix("http://").split(":")
    for raw in (b"POST /sessions/s/end HTTP/9.9\r\n\r\n", b"GET /" + b"a" * 20_000):
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(raw)
            assert conn.recv(100).startswith(b"HTTP/1.1 4")
    assert not (running.out / "sessions.jsonl").exists()  # none of it wrote anything
    (ended,) = control.end_session(running.out, "s")
    assert ended.now and ended.status.stop_reason == "completed"
    figure("control_listener_attacks", attempts=len(attempts) + 6, lines_written=0)


def test_end_is_idempotent_and_an_unseen_session_gets_its_line(
    upstream: Upstream, tmp_path: Path
) -> None:
    """The real CLI (its main, called here) against a real `modeltap run` process."""
    out = tmp_path / "out"
    p = ProxyProcess("--out", str(out), "--route", f"stub={upstream.url}", "-q")

    def session_end(session: str) -> subprocess.CompletedProcess[str]:
        return cli_main("session", "end", session, "--out", str(out))

    try:
        client = openai.OpenAI(base_url=f"{p.url}/stub/v1", api_key="k", max_retries=0)
        client.chat.completions.create(
            model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "eval-1"}
        )
        first = session_end("eval-1")
        assert first.returncode == 0, first.stderr
        status = orjson.loads(first.stdout)
        assert (status["stop_reason"], status["evidence_complete"]) == ("completed", True)
        second = session_end("eval-1")
        assert second.returncode == 0
        assert orjson.loads(second.stdout) == status  # the first status, again
        assert "had already ended" in second.stderr
        # No request of it came through (the agent bypassed the proxy): ended all
        # the same, its line says so, and so does the command (exit 1).
        unseen = session_end("never-seen")
        assert unseen.returncode == 1
        assert "no model request of session 'never-seen' was audited" in unseen.stderr
        never = orjson.loads(unseen.stdout)
        assert (never["message"], never["requests_audited"]) == (NO_REQUESTS_MESSAGE, 0)
        again = session_end("never-seen")  # idempotent: the first status, nothing written
        assert (again.returncode, orjson.loads(again.stdout)) == (1, never)
        assert session_lines(out, "eval-1") == [status]
        assert session_lines(out, "never-seen") == [never]
        assert_check_fails(out, "never-seen")
    finally:
        assert p.stop() == 0
    # Stopping the proxy does not end them again either.
    assert read_jsonl(out / "sessions.jsonl") == [status, never]


def test_requests_in_an_ended_session_are_refused(start_proxy: Callable[..., Running]) -> None:
    """HTTP, a message on a WebSocket that was already open, and a new handshake."""
    running = start_proxy()
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    headers = {"x-modeltap-session": "done"}
    client.chat.completions.create(model="gpt-5", messages=CHAT, extra_headers=headers)
    with connect(url, additional_headers=headers) as ws:
        ws.send(orjson.dumps(CREATE).decode())
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
            pass
        (ended,) = control.end_session(running.out, "done")
        assert ended.status.evidence_complete is True
        ws.send(orjson.dumps(CREATE).decode())
        event = orjson.loads(ws.recv(timeout=10))
        assert event["type"] == "error" and "session_ended" in event["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="session_ended"):
        client.chat.completions.create(model="gpt-5", messages=CHAT, extra_headers=headers)
    with pytest.raises(Exception, match="400"):
        connect(url, additional_headers=headers).close()
    # Nothing of it reached the upstream.
    assert len(running.upstream.received) == 1 and len(running.upstream.ws_received) == 1
    running.proxy.stop()
    assert rejected_rules(running, "done") == ["session_ended"] * 3
    assert session_lines(running.out, "done") == [
        orjson.loads(line)
        for line in (running.out / "sessions.jsonl").read_bytes().splitlines()
        if orjson.loads(line)["session_id"] == "done"
    ]
    assert len(session_lines(running.out, "done")) == 1  # one line, never rewritten
    # What came after the end is evidence too: the session does not pass.
    session = Capture.load(running.out).sessions["done"]
    assert not session.evidence_complete
    assert any("request refused (session_ended)" in e for e in session.capture_errors)
    assert not any("sessions.jsonl says" in e for e in session.capture_errors)
    assert check.problems(Capture.load(running.out), "done")["done"]


def codex_turn(ws: Any, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(orjson.dumps(message).decode())
    while True:
        event: dict[str, Any] = orjson.loads(ws.recv(timeout=10))
        if event["type"] in ("response.completed", "error"):
            return event


def tool_call_script(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
    answered = any(i.get("type") == "function_call_output" for i in message.get("input", []))
    return [ws_completed(n, [] if answered else [ws_lookup_call(n)])]


def test_a_websocket_conversation_that_reconnects_is_one_session(
    start_proxy: Callable[..., Running],
) -> None:
    """Codex sends its thread id as x-client-request-id on every socket: a tool call
    asked on one socket and answered on the next is one session, complete."""
    running = start_proxy()
    running.upstream.ws_script = tool_call_script
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    thread = {"x-client-request-id": "thread-1"}
    with connect(url, additional_headers=thread) as ws:
        assert codex_turn(ws, CREATE)["response"]["output"][0]["call_id"] == "call_1"
    (first,) = session_lines(running.out, "thread-1")
    assert first["evidence_complete"] is False  # the call had no result yet
    with connect(url, additional_headers=thread) as ws:
        answer = {**CREATE, "input": [{"type": "function_call_output", "call_id": "call_1"}]}
        answer["previous_response_id"] = "resp_1"
        assert codex_turn(ws, answer)["type"] == "response.completed"
    running.proxy.stop()
    lines = session_lines(running.out, "thread-1")
    assert len(lines) == 2
    assert lines[-1]["requests_audited"] == 2  # the whole conversation
    assert lines[-1]["tool_calls_admitted"] == 1
    assert (lines[-1]["stop_reason"], lines[-1]["evidence_complete"]) == ("completed", True)
    session = Capture.load(running.out).sessions["thread-1"]
    assert session.evidence_complete, session.capture_errors
    assert check.main([str(running.out)]) == 0


def test_reconnecting_does_not_reset_fail_closed(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(fail_closed=True)
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    thread = {"x-client-request-id": "thread-2"}
    with connect(url, additional_headers=thread) as ws:
        refused = codex_turn(ws, {**CREATE, "model": ""})
        assert refused["type"] == "error"
    with connect(url, additional_headers=thread) as ws:
        again = codex_turn(ws, CREATE)
        assert again["type"] == "error" and "fail_closed" in again["error"]["message"]
    assert running.upstream.ws_received == []
    running.proxy.stop()
    assert session_lines(running.out, "thread-2")[-1]["stop_reason"] == "request_audit_error"
    assert check.main([str(running.out)]) == 1


def test_ended_sessions_are_remembered_within_a_bound(
    start_proxy: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory stays bounded: only the newest ended sessions are kept (10,000 by
    default; 3 here). A late request in a forgotten one opens a new session, whose
    own line is written at stop; the files keep both, so nothing reads as one
    clean session."""
    import modeltap.core.sessions

    monkeypatch.setattr(modeltap.core.sessions, "ENDED_SESSIONS_KEPT", 3)
    running = start_proxy()
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    for n in range(5):
        headers = {"x-modeltap-session": f"s{n}"}
        client.chat.completions.create(model="gpt-5", messages=CHAT, extra_headers=headers)
        control.end_session(running.out, f"s{n}")
    assert list(running.proxy.core.sessions._ended) == ["s2", "s3", "s4"]
    with pytest.raises(openai.BadRequestError, match="session_ended"):
        client.chat.completions.create(
            model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "s4"}
        )
    client.chat.completions.create(
        model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "s0"}
    )
    running.proxy.stop()
    assert len(session_lines(running.out, "s0")) == 2
    assert check.main([str(running.out), "--session", "s4"]) == 1


def test_a_long_session_keeps_no_state_per_turn() -> None:
    """The live tracker of a 10,000-turn session (each a tool call answered by the
    next turn) holds no per-turn state: what it keeps is what is still open."""
    import tracemalloc

    from modeltap.core.sessions import SessionTracker
    from modeltap.evidence.records import ToolCall, ToolResult
    from tests.test_capture import audit, response

    def held_by_the_tracker() -> int:
        # What is still allocated by the tracker's own code (not by this test's records).
        mine = [tracemalloc.Filter(True, f"*modeltap/{f}.py") for f in ("sessions", "coverage")]
        return sum(
            s.size for s in tracemalloc.take_snapshot().filter_traces(mine).statistics("filename")
        )

    tracker = SessionTracker("run", "long")
    tracemalloc.start()
    sizes = []
    for n in range(1, 10_001):
        results = (ToolResult(f"call_{n - 1}", 10),) if n > 1 else ()
        tracker.audited(audit(n, n, tool_results=results))
        tracker.responded(response(n, n + 0.5, tool_calls=(ToolCall(f"call_{n}", "f", "{}"),)))
        if n in (1_000, 10_000):
            sizes.append(held_by_the_tracker())
    tracemalloc.stop()
    status = tracker.status()
    assert status.requests_audited == 10_000 and status.tool_calls_admitted == 9_999
    # Only the last call is still open, so the line names just that one.
    assert status.capture_errors == (
        "[turn 10000] tool call f (call_10000) got no result in a later request",
    )
    growth = sizes[1] - sizes[0]
    assert growth < 4096, growth  # 9,000 more turns: no per-turn state kept
    figure("long_session_tracker", turns=10_000, held_at_1000=sizes[0], held_at_10000=sizes[1])


def test_a_control_port_in_use_stops_the_start(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        run = [sys.executable, "-m", "modeltap.app.cli", "run", "--listen", "127.0.0.1:0"]
        result = subprocess.run(
            [*run, "--out", str(tmp_path), "--control", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen for the control API on 127.0.0.1:{port}" in result.stderr


def test_an_unseen_session_is_written_once_among_proxies_sharing_an_out_dir(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Two proxies on one out dir: a session one of them saw is ended there only
    (the other writes nothing: it was not the agent's way around), and one neither
    saw gets its "audit unsupported" line once."""
    from modeltap.app.proxy import Proxy, ProxyConfig

    out = tmp_path / "out"

    def config() -> ProxyConfig:
        return ProxyConfig(listen_port=0, out=str(out), routes=[f"stub={upstream.url}"], quiet=True)

    with Proxy(config()) as first, Proxy(config()):
        client = openai.OpenAI(base_url=f"{first.url}/stub/v1", api_key="k", max_retries=0)
        client.chat.completions.create(
            model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "seen"}
        )
        (seen,) = control.end_session(out, "seen")
        (unseen,) = control.end_session(out, "unseen")
        assert control.end_session(out, "unseen")[0].status == unseen.status  # idempotent
    assert (seen.status.requests_audited, unseen.status.requests_audited) == (1, 0)
    assert unseen.status.message == NO_REQUESTS_MESSAGE
    lines = read_jsonl(out / "sessions.jsonl")
    assert sorted(s["session_id"] for s in lines) == ["seen", "unseen"]
