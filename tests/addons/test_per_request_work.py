"""What one audited chat request costs in endpoint matches and body parses,
with every listener that reads the request on: the recorder or the replayer,
and spans with content capture. The gate matches the path once and the audit
parses the body once; the exchange keeps both on its view (``endpoint``,
``body``) and the listeners read them there (issue 25, item 4)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mitmproxy.test import tflow

from modeltap import apis
from modeltap.addons.evidence import Evidence
from modeltap.addons.http import Http
from tests.addons.conftest import CHAT, Tap, chat_through, model_flow, tap
from tests.addons.test_replayer import replayer
from tests.otlp_receiver import HttpReceiver

pytestmark = pytest.mark.anyio
pytest_plugins = ["tests.otlp_fixtures"]


class Counted:
    """Calls of a function, and those whose first argument was the request body."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.calls = 0
        self.of_body = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if args and isinstance(args[0], bytes) and args[0] == CHAT:
            self.of_body += 1
        return self.real(*args, **kwargs)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Counted, Counted]]:
    """``apis.match_endpoint`` and ``orjson.loads``, counted wherever they are called."""
    matches, parses = Counted(apis.match_endpoint), Counted(orjson.loads)
    monkeypatch.setattr(apis, "match_endpoint", matches)
    monkeypatch.setattr(orjson, "loads", parses)
    yield matches, parses


def spans_with_content(receiver: HttpReceiver) -> dict[str, Any]:
    return {"otlp": receiver.endpoint, "capture_content": True}


def assert_once(t: Tap, counted: tuple[Counted, Counted]) -> None:
    matches, parses = counted
    assert len(t.audit()) == 1
    assert (matches.calls, parses.of_body) == (1, 1)


async def test_recorded_and_exported_the_request_is_matched_and_parsed_once(
    tmp_path: Path, otlp_http_receiver: HttpReceiver, counted: tuple[Counted, Counted]
) -> None:
    config = spans_with_content(otlp_http_receiver)
    with tap(tmp_path, record=str(tmp_path / "rec"), **config) as t:
        chat_through(t, **{"x-modeltap-session": "s1"})
        assert_once(t, counted)
        t.addon(Evidence).done()


async def test_replayed_and_exported_the_request_is_matched_and_parsed_once(
    tmp_path: Path, otlp_http_receiver: HttpReceiver, counted: tuple[Counted, Counted]
) -> None:
    with tap(tmp_path, **spans_with_content(otlp_http_receiver)) as t:
        replay = replayer(t, tmp_path)
        for count in counted:
            count.calls = count.of_body = 0  # making the recording parsed it too
        flow = model_flow(**{"x-modeltap-session": "s1"})
        t.addon(Http).requestheaders(flow)
        t.addon(Http).request(flow)
        assert flow.response is None and replay.turns_played == 1
        assert_once(t, counted)
        replay.server.close()
        t.addon(Evidence).done()


async def test_a_websocket_turn_reads_its_match_and_body_off_its_view(tmp_path: Path) -> None:
    with tap(tmp_path, record=str(tmp_path / "rec")) as t:
        flow = tflow.twebsocketflow()
        flow.response = None
        flow.request.path = "/stub/v1/responses"
        t.addon(Http).requestheaders(flow)
        t.addon(Http).request(flow)
        view = flow.metadata["modeltap"]
        assert view.endpoint is not None and view.endpoint.api == "openai.responses"
