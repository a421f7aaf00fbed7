"""The pytest plugin: the ``modeltap`` fixture, its marker and its options.

Inner test files run with ``pytester`` against the upstream stub (the stub's
URL reaches them through the options under test); the last tests use the
fixture directly in this repo's own tests.

The inner sessions run in a subprocess. In-process, pytester restores
``sys.modules`` after each run and so drops every module first imported inside
it, while modules that stay keep references into them: httpx2 caches its map
of httpcore2 exceptions on first use, and once an inner run had built it from
an httpcore2 that was then dropped, a later test in this process got httpcore2's
raw ``RemoteProtocolError`` where the openai SDK expects ``httpx2``'s (so
``tests/test_proxy_guards.py::test_cut_stream_reads_evidence_incomplete``
failed whenever this file ran first).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from modeltap.app.pytest_plugin import ModelTapFixture
from modeltap.evidence.capture import NO_REQUESTS
from tests.upstream import Upstream, chat_tool_json

pytest_plugins = ["pytester"]

KEY = "sk-test-PLANTED-SECRET-0123456789"

#: An inner test: one chat request through ``modeltap.url + "/v1"`` (the upstream at ``/``).
ONE_TURN_VIA_UPSTREAM = """
import openai


def test_one_turn(modeltap, tmp_path):
    assert modeltap.out_dir == tmp_path / "modeltap"
    client = openai.OpenAI(base_url=modeltap.url + "/v1", api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="inner-model", messages=[])

    capture = modeltap.capture()
    (turn,) = [turn for session in capture.sessions.values() for turn in session.turns]
    assert (turn.model, turn.record.route) == ("inner-model", "upstream")
    assert capture.evidence_complete, capture.capture_errors
    assert modeltap.report()["counts"]["turns"] == 1
"""


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run the inner session in its own interpreter, without Hypothesis's plugin."""
    return pytester.runpytest_subprocess("-p", "no:hypothesispytest", *args)


#: Appended to an inner file: runs after the test before it has been torn down.
NO_PROXY_THREAD_LEFT = """

def test_zz_proxy_thread_stopped():
    import threading

    assert [t.name for t in threading.enumerate() if t.name == "modeltap-proxy"] == []
"""


def test_command_line_upstream_and_teardown(pytester: pytest.Pytester, upstream: Upstream) -> None:
    # The fixture stops the proxy (and its thread) when the inner test ends.
    pytester.makepyfile(ONE_TURN_VIA_UPSTREAM + NO_PROXY_THREAD_LEFT)
    result = run_inner(pytester, "--modeltap-upstream", upstream.url)
    result.assert_outcomes(passed=2)
    assert [r.path for r in upstream.received] == ["/v1/chat/completions"]


def test_ini_upstream(pytester: pytest.Pytester, upstream: Upstream) -> None:
    pytester.makepyprojecttoml(f'[tool.pytest.ini_options]\nmodeltap_upstream = "{upstream.url}"\n')
    pytester.makepyfile(ONE_TURN_VIA_UPSTREAM)
    run_inner(pytester).assert_outcomes(passed=1)


def test_command_line_beats_ini(pytester: pytest.Pytester, upstream: Upstream) -> None:
    pytester.makeini("[pytest]\nmodeltap_upstream = http://127.0.0.1:9\n")
    pytester.makepyfile(ONE_TURN_VIA_UPSTREAM)
    run_inner(pytester, "--modeltap-upstream", upstream.url).assert_outcomes(passed=1)


def test_markers_closest_wins_key_by_key(pytester: pytest.Pytester, upstream: Upstream) -> None:
    pytester.makepyfile(
        f"""
        import openai
        import pytest


        @pytest.mark.modeltap(routes=["openai={upstream.url}"], session="from-class")
        class TestMarked:
            @pytest.mark.modeltap(session="from-function")
            def test_function_marker(self, modeltap):
                client = openai.OpenAI(
                    base_url=modeltap.openai_base_url, api_key="sk-test", max_retries=0
                )
                client.chat.completions.create(model="m", messages=[])
                (record,) = modeltap.capture().records
                assert (record.route, record.session_id) == ("openai", "from-function")

            def test_class_marker(self, modeltap):
                client = openai.OpenAI(
                    base_url=modeltap.openai_base_url, api_key="sk-test", max_retries=0
                )
                client.chat.completions.create(model="m", messages=[])
                (record,) = modeltap.capture().records
                assert (record.route, record.session_id) == ("openai", "from-class")


        @pytest.mark.modeltap(upstream="{upstream.url}")
        def test_marker_beats_command_line(modeltap):
            client = openai.OpenAI(base_url=modeltap.url + "/v1", api_key="sk-test", max_retries=0)
            client.chat.completions.create(model="m", messages=[])
            assert len(modeltap.capture().records) == 1
        """
    )
    result = run_inner(pytester, "--modeltap-upstream", "http://127.0.0.1:9")
    result.assert_outcomes(passed=3)
    assert len(upstream.received) == 3


def test_the_command_lines_option_names_are_accepted(
    pytester: pytest.Pytester, upstream: Upstream
) -> None:
    """``modeltap run``'s spellings work as keys (issue 15): ``listen``, ``route``, dashes."""
    pytester.makepyfile(
        f"""
        import openai
        import pytest


        @pytest.mark.modeltap(
            listen="127.0.0.1:0", route=["stub={upstream.url}"], **{{"max-body": "1k"}}
        )
        def test_cli_names(modeltap):
            assert modeltap.url.startswith("http://127.0.0.1:")
            client = openai.OpenAI(
                base_url=modeltap.base_url("stub") + "/v1", api_key="sk-test", max_retries=0
            )
            client.chat.completions.create(model="m", messages=[])
            big = [{{"role": "user", "content": "x" * 2048}}]
            with pytest.raises(openai.APIStatusError, match="body_too_large"):
                client.chat.completions.create(model="m", messages=big)
            (record,) = modeltap.capture().records
            assert record.route == "stub"
        """
    )
    run_inner(pytester).assert_outcomes(passed=1)
    assert len(upstream.received) == 1


def test_quiet_unless_asked(pytester: pytest.Pytester, upstream: Upstream) -> None:
    pytester.makepyfile(
        """
        import openai
        import pytest


        def ask(modeltap):
            client = openai.OpenAI(base_url=modeltap.url + "/v1", api_key="sk-test", max_retries=0)
            client.chat.completions.create(model="loud-or-quiet", messages=[])


        def test_quiet_by_default(modeltap, capsys):
            ask(modeltap)
            assert "loud-or-quiet" not in capsys.readouterr().err


        @pytest.mark.modeltap(quiet=False)
        def test_one_line_per_exchange_when_asked(modeltap, capsys):
            ask(modeltap)
            assert "loud-or-quiet" in capsys.readouterr().err
        """
    )
    run_inner(pytester, "--modeltap-upstream", upstream.url).assert_outcomes(passed=2)


def test_bad_configuration_is_a_setup_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest


        @pytest.mark.modeltap(colour="blue", routes=[])
        def test_unknown_option(modeltap):
            pass


        @pytest.mark.modeltap("http://127.0.0.1:9")
        def test_positional(modeltap):
            pass


        @pytest.mark.modeltap(routes=["no-equals-sign"])
        def test_bad_route(modeltap):
            pass
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        [
            "*modeltap: unknown option(s) colour; use fields of ProxyConfig:*",
            "*@pytest.mark.modeltap takes keyword arguments only*",
            "*modeltap did not start: --route takes NAME=URL (or NAME=URL,provider=P), "
            "got 'no-equals-sign'*",
        ]
    )


def test_marker_and_option_are_documented(pytester: pytest.Pytester) -> None:
    run_inner(pytester, "--markers").stdout.fnmatch_lines(["@pytest.mark.modeltap(**options):*"])
    run_inner(pytester, "--help").stdout.fnmatch_lines(
        ["*--modeltap-upstream=URL*", "*modeltap_upstream (string):*"]
    )


def test_importing_the_plugin_does_not_import_mitmproxy() -> None:
    # The plugin loads in every pytest run of a project that installs modeltap.
    code = "import sys, modeltap.app.pytest_plugin; sys.exit('mitmproxy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --------------------------------------------------------------------------
# The fixture used directly


@pytest.fixture
def modeltap_config(upstream: Upstream) -> dict[str, Any]:
    """Both provider routes lead to the stub in this module's direct tests."""
    return {"routes": [f"openai={upstream.url}", f"anthropic={upstream.url}"]}


def test_fixture_urls_and_fresh_captures(
    modeltap: ModelTapFixture, upstream: Upstream, tmp_path: Path
) -> None:
    assert modeltap.out_dir == tmp_path / "modeltap"
    assert modeltap.base_url("openai") == modeltap.url + "/openai"
    assert modeltap.base_url("/vllm/") == modeltap.url + "/vllm"
    assert modeltap.openai_base_url == modeltap.url + "/openai/v1"
    assert modeltap.anthropic_base_url == modeltap.url + "/anthropic"

    # Nothing sent yet: an empty capture that says so, not an exception.
    empty = modeltap.capture()
    assert (empty.sessions, empty.evidence_complete) == ({}, False)
    assert empty.capture_errors == [NO_REQUESTS]

    oai = openai.OpenAI(base_url=modeltap.openai_base_url, api_key=KEY, max_retries=0)
    oai.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hi"}])
    assert [r.api for r in modeltap.capture().records] == ["openai.chat_completions"]

    anth = anthropic.Anthropic(base_url=modeltap.anthropic_base_url, api_key=KEY, max_retries=0)
    anth.messages.create(
        model="claude-x", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    capture = modeltap.capture()  # read again: the new lines are there
    assert [(r.api, r.route) for r in capture.records] == [
        ("openai.chat_completions", "openai"),
        ("anthropic.messages", "anthropic"),
    ]
    assert capture.evidence_complete, capture.capture_errors
    assert [r.path for r in upstream.received] == ["/v1/chat/completions", "/v1/messages"]

    report = modeltap.report()
    assert report["directory"] == str(modeltap.out_dir)
    assert report["counts"]["turns"] == 2
    assert report["evidence_complete"] is True


@pytest.mark.modeltap(session="direct")
def test_marker_on_a_direct_test(modeltap: ModelTapFixture) -> None:
    oai = openai.OpenAI(base_url=modeltap.openai_base_url, api_key=KEY, max_retries=0)
    oai.chat.completions.create(model="gpt-x", messages=[])
    assert list(modeltap.capture().sessions) == ["direct"]


@pytest.mark.modeltap(session="direct-end")
def test_fixture_ends_a_session_through_the_control_api(modeltap: ModelTapFixture) -> None:
    oai = openai.OpenAI(base_url=modeltap.openai_base_url, api_key=KEY, max_retries=0)
    oai.chat.completions.create(model="gpt-x", messages=[])
    status = modeltap.end_session("direct-end")
    assert (status.stop_reason, status.evidence_complete) == ("completed", True)
    assert modeltap.end_session("direct-end") == status  # again: the same, nothing written
    assert len((modeltap.out_dir / "sessions.jsonl").read_bytes().splitlines()) == 1
    # A session no request of which came through (the agent bypassed the proxy):
    # ended all the same, its line says so, and the capture fails it by name.
    nobody = modeltap.end_session("nobody")
    assert (nobody.message, nobody.requests_audited) == (NO_REQUESTS, 0)
    assert modeltap.end_session("nobody") == nobody  # idempotent: nothing written again
    assert len((modeltap.out_dir / "sessions.jsonl").read_bytes().splitlines()) == 2
    assert not modeltap.capture().sessions["nobody"].evidence_complete
    with pytest.raises(openai.BadRequestError, match="session_ended"):
        oai.chat.completions.create(model="gpt-x", messages=[])
    # The late request is evidence too: the session no longer reads as complete.
    assert not modeltap.capture().sessions["direct-end"].evidence_complete


def test_report_is_typed_prints_as_text_and_keeps_its_keys(modeltap: ModelTapFixture) -> None:
    from modeltap.report.report import build_report, render_text

    oai = openai.OpenAI(base_url=modeltap.openai_base_url, api_key=KEY, max_retries=0)
    for model in ("gpt-a", "gpt-b"):
        oai.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-modeltap-session": "typed"},
        )
    report = modeltap.report()
    (session,) = report.sessions
    assert (session.session_id, session.models) == ("typed", ("gpt-a", "gpt-b"))
    assert [(t.model, t.tool_calls, t.errors) for t in session.turns] == [
        ("gpt-a", (), ()),
        ("gpt-b", (), ()),
    ]
    assert report.session("typed") is session and report.turns == session.turns
    # Numbered as the text shows them, from 1; the index is the position.
    assert [(t.number, t.index, t.attempt, t.retry_of_turn) for t in session.turns] == [
        (1, 0, 1, None),
        (2, 1, 1, None),
    ]
    assert report.evidence_complete and session.turns[0].evidence_complete
    # The text is `modeltap report`'s, the keys `modeltap report --json`'s.
    expected = build_report(modeltap.capture())
    assert str(report) == report.text() == render_text(expected)
    assert report["counts"]["turns"] == 2 and dict(report) == expected
    assert [t["model"] for t in report["sessions"][0]["turns"]] == ["gpt-a", "gpt-b"]


# --------------------------------------------------------------------------
# Verdicts: modeltap.expect, the failure text, and the summary of unavailable ones

VERDICT_TESTS = """
import openai
import pytest

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def client(modeltap):
    return openai.OpenAI(base_url=modeltap.url + "/v1", api_key="sk-test", max_retries=0)


def test_passes_on_evidence(modeltap):
    client(modeltap).chat.completions.create(model="inner-model", messages=[], tools=TOOLS)
    assert modeltap.expect.model_used("inner-model")
    # The fixture records: the final text is read from its recording.
    assert modeltap.expect.final_text_contains("hello from the stub")
    # A gap marked optional does not fail, and is still listed in the summary.
    assert modeltap.expect.max_cost(1.0).optional()


def test_fails_with_the_verdict_paragraph(modeltap):
    client(modeltap).chat.completions.create(model="inner-model", messages=[])
    assert modeltap.expect.model_used("other-model")


def test_an_unavailable_verdict_fails_the_assert(modeltap):
    assert modeltap.expect.tool_not_called("delete_account")
"""


def test_verdicts_in_pytest(pytester: pytest.Pytester, upstream: Upstream) -> None:
    pytester.makepyfile(VERDICT_TESTS)
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef modeltap_config(tmp_path):\n"
        "    return {'record': str(tmp_path / 'record')}\n"
    )
    result = run_inner(pytester, "--modeltap-upstream", upstream.url)
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    # A failing `assert verdict` shows the verdict's whole paragraph.
    assert "modeltap verdicts" in text
    assert (
        "model_used('other-model') on the capture: FAILED. No request asked for 'other-model' "
        "(models used: ['inner-model'])." in text
    )
    assert (
        "tool_not_called('delete_account') on the capture: UNAVAILABLE. No call of "
        "'delete_account' was seen; the actions channel is unavailable: No outbound model "
        "requests captured; audit unsupported." in text
    )
    # The summary lists every unavailable verdict, the optional one too.
    summary = text[text.index("modeltap: unavailable verdicts") :]
    assert "test_verdicts_in_pytest.py::test_passes_on_evidence: max_cost(1.0)" in summary
    assert "(optional)" in summary
    assert "::test_an_unavailable_verdict_fails_the_assert: tool_not_called" in summary
    assert "2 unavailable verdicts (1 optional)" in summary


EVIL_TOOL_TEST = """
import openai


def test_evil(modeltap):
    client = openai.OpenAI(base_url=modeltap.url + "/v1", api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="m", messages=[])
    assert modeltap.expect.tool_called("transfer")
"""


def test_a_failing_assert_shows_no_raw_wire_text(
    pytester: pytest.Pytester, upstream: Upstream
) -> None:
    """pytest writes ``assert <Verdict ...>`` with the verdict's repr, and the short
    summary line too: a tool name's terminal escapes must arrive escaped."""
    upstream.replies.append(chat_tool_json("m", name="look\x1b[2Jup", arguments="{}"))
    pytester.makepyfile(EVIL_TOOL_TEST)
    result = run_inner(pytester, "--modeltap-upstream", upstream.url, "-rf")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "\x1b" not in text
    assert "calls seen: look\\x1b[2Jup" in text
    assert "AssertionError: assert <Verdict tool_called('transfer'): unavailable" in text
