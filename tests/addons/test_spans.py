"""The spans addon: its options, and the run's notices as exported spans."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import exceptions

from modeltap.addons.evidence import Evidence
from modeltap.addons.http import Http
from modeltap.addons.spans import Spans
from tests.addons.conftest import chat_through, model_flow, tap
from tests.otlp_receiver import HttpReceiver

pytestmark = pytest.mark.anyio
pytest_plugins = ["tests.otlp_fixtures"]


async def test_an_unusable_endpoint_is_refused(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        with pytest.raises(exceptions.OptionsError, match="otlp"):
            t.tctx.options.update(modeltap_otlp="ftp://collector:4317")
        spans = t.addon(Spans)
        assert not spans.telemetry.enabled and spans not in t.run.listeners


async def test_exchanges_become_spans(tmp_path: Path, otlp_http_receiver: HttpReceiver) -> None:
    with tap(tmp_path, otlp=otlp_http_receiver.endpoint) as t:
        spans = t.addon(Spans)
        assert spans.telemetry.enabled and spans in t.run.listeners
        http_ = t.addon(Http)
        chat_through(t, **{"x-modeltap-session": "s1"})
        refused = model_flow(body=b"{}")
        http_.requestheaders(refused)
        http_.request(refused)
        t.addon(Evidence).done()  # the run stops: spans are flushed
        assert spans.summary is not None
    received = otlp_http_receiver.wait_for(4)
    names = sorted(s.name for s in received)
    assert "chat gpt-5" in names and "chat" in names
    (chat,) = [s for s in received if s.name == "chat gpt-5"]
    assert chat.attributes["gen_ai.response.model"] == "gpt-5"
    assert chat.attributes["modeltap.session_id"] == "s1"
    (refusal,) = [s for s in received if s.name == "chat"]
    assert refusal.attributes["error.type"] == "missing_model"
