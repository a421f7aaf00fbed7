"""The console addon: one stderr line per exchange, unless quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from modeltap.addons.console import Console, lines
from modeltap.addons.http import Http
from modeltap.errors import Rejected, Rule
from modeltap.notices import Outcome
from modeltap.records import UnauditedEvent
from tests.addons.conftest import chat_through, model_flow, tap
from tests.conftest import exchange_view
from tests.factories import error_event

pytestmark = pytest.mark.anyio

VIEW = exchange_view(method="GET", path="/v1/models", api=None)
ENVELOPE = {"ts": "t", "run_id": "r", "session_id": "s1"}


def test_the_lines_say_what_happened() -> None:
    refused = Outcome(VIEW, 0, status=400, rejected=Rejected(Rule.MISSING_MODEL))
    assert lines(refused, "12:00:00") == ["12:00:00 s1 - - 400 - - refused: missing_model"]
    unaudited = UnauditedEvent(**ENVELOPE, method="GET", host=None, path="/v1/models", status=None)
    error = error_event(session_id="s1", error="upstream_reset")
    broke = Outcome(VIEW, 0, unaudited=unaudited, error=error)
    assert lines(broke, "12:00:00") == [
        "12:00:00 s1 - - - - - unaudited GET /v1/models",
        "12:00:00 s1 - - - - - error: upstream_reset",
    ]


async def test_a_line_per_exchange_unless_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tap(tmp_path, quiet=False) as t:
        http_ = t.addon(Http)
        chat_through(t, **{"x-modeltap-session": "s1"})
        line = capsys.readouterr().err
        assert " s1 openai.chat_completions gpt-5 200 in=21 out=5 " in line
        t.tctx.options.update(modeltap_quiet=True)
        assert t.addon(Console) not in t.run._listeners
        http_.requestheaders(model_flow("/__modeltap/"))
        assert capsys.readouterr().err == ""
