"""The evidence addon: ``--out``, the session options, and the end of the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import exceptions

from modeltap.addons.evidence import Evidence
from tests.addons.conftest import tap
from tests.conftest import read_jsonl

pytestmark = pytest.mark.anyio


async def test_an_out_dir_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    with (
        tap(tmp_path) as t,
        pytest.raises(exceptions.OptionsError, match="cannot create the out dir"),
    ):
        t.tctx.options.update(modeltap_out=str(tmp_path / "a-file" / "out"))


async def test_a_negative_tool_budget_is_refused(tmp_path: Path) -> None:
    with (
        tap(tmp_path) as t,
        pytest.raises(exceptions.OptionsError, match="modeltap_max_tool_calls: -1 is not a"),
    ):
        t.tctx.options.update(modeltap_max_tool_calls=-1)


async def test_session_options_reach_the_core(tmp_path: Path) -> None:
    with tap(tmp_path, session="named", fail_closed=True, max_tool_calls=2) as t:
        assert (t.run.settings.session, t.run.settings.fail_closed) == ("named", True)
        tracker = t.run.sessions.open["named"]  # opened at start, reported at the end
        assert tracker.max_tool_calls == 2
        t.addon(Evidence).done()
        (status,) = read_jsonl(t.out / "sessions.jsonl")
        assert (status["session_id"], status["requests_audited"]) == ("named", 0)
        assert t.run.stopped


async def test_a_new_out_dir_replaces_the_files(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        first = t.run.sink
        t.tctx.options.update(modeltap_out=str(tmp_path / "elsewhere"))
        assert t.run.sink is not first and (tmp_path / "elsewhere").is_dir()


async def test_a_moved_file_names_the_sessions_that_had_lines(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        assert t.run.sink is not None
        assert t.run.sink.sessions_with_lines == t.run.file_reopened
