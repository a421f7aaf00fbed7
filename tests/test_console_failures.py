"""``modeltap run``'s stderr line for an exchange that failed says what happened
(issue 15: it read ``gpt-stub - in=? out=? 1ms``), for HTTP exchanges and
WebSocket turns; a failed WebSocket turn writes its ``error`` event and its
span carries the error."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2 as httpx
import openai
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve

from tests.cli_process import CliProcess
from tests.conftest import Running, read_jsonl
from tests.otlp_receiver import HttpReceiver
from tests.reliability.faults import wait_until
from tests.upstream import Reply, Upstream, chat_text_sse, default_ws_events

pytest_plugins = ["tests.otlp_fixtures"]

MESSAGES = [{"role": "user", "content": "x"}]
CREATE = {"type": "response.create", "model": "m-ws", "input": "x"}


class CutWebSocket:
    """Answers a response.create with response.created, then closes (1011)."""

    def __init__(self) -> None:
        self.server: Server = serve(self._handle, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"

    def _handle(self, ws: ServerConnection) -> None:
        message = orjson.loads(ws.recv(timeout=10))
        ws.send(orjson.dumps(default_ws_events(message, 1)[0]).decode())
        ws.close(code=1011, reason="upstream broke")

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(10)


@pytest.fixture
def cut_ws() -> Iterator[CutWebSocket]:
    server = CutWebSocket()
    yield server
    server.close()


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that takes connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


@pytest.fixture
def dead() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: nothing listens there


def ws_turn_is_cut(url: str) -> None:
    with connect(url, open_timeout=10) as ws:
        ws.send(orjson.dumps(CREATE).decode())
        assert orjson.loads(ws.recv(timeout=10))["type"] == "response.created"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)


def test_failed_exchanges_say_what_happened(
    tmp_path: Path, upstream: Upstream, cut_ws: CutWebSocket, silent: int, dead: int
) -> None:
    with CliProcess(
        "run", "--out", str(tmp_path), "--session", "s1", "--upstream-timeout", "first-byte=1",
        "--route", f"stub={upstream.url}", "--route", f"dead=http://127.0.0.1:{dead}",
        "--route", f"silent=http://127.0.0.1:{silent}", "--route", f"cut={cut_ws.url}",
    ) as cli:  # fmt: skip

        def chat(route: str, model: str, **kwargs: object) -> object:
            client = openai.OpenAI(base_url=f"{cli.url}/{route}/v1", api_key="k", max_retries=0)
            return client.chat.completions.create(model=model, messages=MESSAGES, **kwargs)

        def line(model: str) -> str:
            found = cli.wait_for_line(lambda text: f" {model} " in text)
            return found.split(" ", 1)[1]  # without the clock

        with pytest.raises(openai.InternalServerError):
            chat("dead", "m-dead")
        assert line("m-dead").startswith("s1 openai.chat_completions m-dead - - ")
        assert line("m-dead").endswith("ms upstream unreachable")

        upstream.replies.append(Reply(sse=chat_text_sse("m-cut").sse, cut_after=1))
        with pytest.raises(openai.APIConnectionError):
            list(chat("stub", "m-cut", stream=True))
        assert line("m-cut").startswith("s1 openai.chat_completions m-cut 200 in=? out=? ")
        assert line("m-cut").endswith("ms stream cut")

        with pytest.raises(openai.APIStatusError) as timed_out:
            chat("silent", "m-silent")
        assert timed_out.value.status_code == 504
        assert line("m-silent").endswith("ms timeout: first byte")

        upstream.replies.append(Reply(sse=chat_text_sse("m-gone").sse, pause_after={0: 2}))
        body = {"model": "m-gone", "messages": MESSAGES, "stream": True}
        with httpx.stream("POST", f"{cli.url}/stub/v1/chat/completions", json=body) as resp:
            next(resp.iter_bytes())  # the first event, then the agent leaves
        assert line("m-gone").endswith("ms client gone")

        with pytest.raises(openai.BadRequestError):
            chat("stub", "")
        cli.wait_for_line(lambda text: text.endswith(" 400 - - refused: missing_model"))

        ws_turn_is_cut(f"{cli.url.replace('http', 'ws')}/cut/v1/responses")
        # (A WebSocket connection is its own session, whatever --session says.)
        assert " openai.responses m-ws - in=? out=? " in line("m-ws")
        assert line("m-ws").endswith("ms stream cut")
        assert cli.stop() == 0
    errors = [e["error"] for e in read_jsonl(tmp_path / "events.jsonl") if e["kind"] == "error"]
    assert sorted(errors) == [
        "client_gone",
        "upstream_reset",  # the cut stream
        "upstream_reset",  # the cut WebSocket turn
        "upstream_timeout",
        "upstream_unreachable",
    ]


def test_a_cut_websocket_turn_has_its_error_event_and_span(
    start_proxy: Callable[..., Running], cut_ws: CutWebSocket, otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(routes=[f"cut={cut_ws.url}"], otlp=otlp_http_receiver.endpoint)
    ws_turn_is_cut(running.base("cut").replace("http", "ws") + "/v1/responses")
    (error,) = wait_until(lambda: running.events("error"))
    (record,) = running.audit()
    assert (error["seq"], error["error"], error["transport"]) == (
        record["seq"],
        "upstream_reset",
        "websocket",
    )
    running.proxy.stop()  # flushes the spans
    spans = otlp_http_receiver.wait_for(3)
    (turn,) = [s for s in spans if s.name == "chat m-ws" or s.name.endswith(" m-ws")]
    assert (turn.status, turn.attributes["error.type"]) == ("ERROR", "upstream_reset")
    sessions = read_jsonl(running.out / "sessions.jsonl")
    assert [s["stop_reason"] for s in sessions] == ["upstream_error"]
