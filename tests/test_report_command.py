"""`modeltap report` and `modeltap check` on a run made the way a new user makes
one: `modeltap run` as a process, the real openai and anthropic SDKs with their
default retries, an upstream that fails twice, one that cannot be reached, and
an SDK that lists models without a session header.

One run serves every test here (the machine is small); each test reads it
through the commands, as a user would (their ``main``, called in this process:
a process start per command added nothing these tests read).
"""

from __future__ import annotations

import shutil
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from modeltap.evidence.capture import Capture
from modeltap.report.view import build_view_data
from tests.cli_process import cli_main
from tests.conftest import read_jsonl
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Reply, Upstream, anthropic_text_json, chat_text_json

CHAT: Any = [{"role": "user", "content": "hi"}]
#: The SDKs honour retry-after-ms: their retries come quickly, in the same pattern.
FAST_RETRY = {"retry-after-ms": "20"}


@dataclass
class Run:
    out: Path
    stderr: str
    #: What `modeltap report DIR` and `modeltap report DIR --json` printed.
    text: str = ""
    json: Any = None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    out = tmp_path_factory.mktemp("first-hour") / "out"
    with Upstream() as stub:
        failing = Reply(status=500, json={"error": {"message": "boom"}}, headers=FAST_RETRY)
        stub.replies.extend([failing, failing, chat_text_json("gpt-5")])
        dead = f"dead=http://127.0.0.1:{_closed_port()}"
        p = ProxyProcess("--out", str(out), "--route", f"stub={stub.url}", "--route", dead)
        try:
            base = f"{p.url}/stub"
            # SDK defaults: two retries. The first call fails twice, then succeeds.
            client = openai.OpenAI(base_url=f"{base}/v1", api_key="k")
            client.chat.completions.create(
                model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "retried"}
            )
            # An upstream nobody answers: three attempts, no response at all.
            unreachable = openai.OpenAI(
                base_url=f"{p.url}/dead/v1", api_key="k", max_retries=2, timeout=5
            )
            with pytest.raises(openai.InternalServerError):  # 502 from modeltap
                unreachable.chat.completions.create(
                    model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "dead"}
                )
            stub.replies.append(anthropic_text_json("claude-x"))
            anthropic.Anthropic(base_url=base, api_key="k").messages.create(
                model="claude-x",
                max_tokens=10,
                messages=CHAT,
                extra_headers={"x-modeltap-session": "claude"},
            )
            # What the SDK does at start-up in many agents: no session header.
            client.models.list()
        finally:
            p.stop(signal.SIGINT)
    text = cli_main("report", str(out))
    assert text.returncode == 0, text.stderr
    yield Run(out, p.stderr.decode(), text.stdout, report_json(out))


def report_json(out: Path) -> dict[str, Any]:
    done = cli_main("report", str(out), "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = orjson.loads(done.stdout)
    return report


def session_of(report: dict[str, Any], session_id: str) -> dict[str, Any]:
    (found,) = [s for s in report["sessions"] if s["session_id"] == session_id]
    return found


# ---------------------------------------------------------------- retries


def test_sdk_retries_are_shown_as_retries(run: Run) -> None:
    # Every attempt is still a record: they are true.
    retried = [r for r in read_jsonl(run.out / "audit.jsonl") if r["session_id"] == "retried"]
    assert len(retried) == 3 and len({r["body_sha256"] for r in retried}) == 1
    session = session_of(run.json, "retried")
    turns = session["turns"]
    assert [t["http_status"] for t in turns] == [500, 500, 200]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert [t["retry_of_turn"] for t in turns] == [None, 1, 2]
    assert [t["attempt"] for t in turns] == [1, 2, 3]
    assert [t["first_attempt_turn"] for t in turns] == [1, 1, 1]
    assert session["retry_count"] == 2
    text = run.text
    assert "turn 1's request was sent 3 times (turns 1, 2, 3); the last answered HTTP 200" in text
    assert "turns 7 (4 retries)" in text.splitlines()[1]
    # The page reads the same rule (it has none of its own).
    page = build_view_data(Capture.load(run.out))
    (view,) = [s for s in page["sessions"] if s["id"] == "retried"]
    assert [t["retry_of"] for t in view["turns"]] == [None, 0, 1]
    assert [t["attempts"] for t in view["turns"]] == [3, None, None]
    assert [t["number"] for t in view["turns"]] == [1, 2, 3]


def test_an_unreachable_upstream_is_no_response_and_each_error_is_said_once(run: Run) -> None:
    session = session_of(run.json, "dead")
    assert [t["retry_of_turn"] for t in session["turns"]] == [None, 1, 2]
    assert session["turns"][0]["coverage"]["usage"]["reason"] == (
        "no response: the upstream never answered"
    )
    assert "provider reported no token usage" not in orjson.dumps(session).decode()
    text = run.text
    block = text.split("session dead", 1)[1].split("\nsession ", 1)[0]
    errors = block.split("  errors\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [e.split("]", 1)[0].strip() for e in errors] == ["[turn 1", "[turn 2", "[turn 3"]
    assert all("upstream_unreachable" in e for e in errors)
    assert "    usage     unavailable  [turns 1-3] no response: the upstream never answered" in (
        block.splitlines()
    )


# ---------------------------------------------------------------- usage


def test_one_usage_vocabulary_the_records_one(run: Run) -> None:
    events = [e for e in read_jsonl(run.out / "events.jsonl") if e["kind"] == "response"]
    names = set(events[0]["usage"])
    assert names == {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    }
    report = run.json
    for usage in (report["token_usage"], *(s["token_usage"] for s in report["sessions"])):
        assert set(usage) == names | {"total_summed"}
    reasons = orjson.dumps(report).decode()
    assert "prompt_tokens" not in reasons and "cache_creation" not in reasons


def test_usage_is_judged_by_what_each_provider_reports(run: Run) -> None:
    report = run.json
    openai_turn = session_of(report, "retried")["turns"][2]
    # The chat wire has no cache-write count: its absence is not "partial".
    assert openai_turn["token_usage"]["cache_write_tokens"] is None
    assert openai_turn["coverage"]["usage"] == {"status": "complete"}
    claude = session_of(report, "claude")
    assert claude["coverage"]["usage"] == {"status": "complete"}
    # Anthropic reports no total: the report's is the sum of its reported parts.
    (event,) = [e for e in read_jsonl(run.out / "events.jsonl") if e["session_id"] == "claude"]
    parts = event["usage"]
    assert parts["total_tokens"] is None  # the record keeps the provider's own numbers
    expected = sum(
        parts[k]
        for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    )
    assert claude["token_usage"]["total_tokens"] == expected
    assert claude["token_usage"]["total_summed"] is True
    text = run.text
    assert f"total {expected}*" in text
    assert "* = total summed by modeltap from the counts the provider reported" in text


# ---------------------------------------------------------------- sessions and check


def test_a_models_listing_without_a_session_header_makes_no_session(run: Run) -> None:
    assert [e["kind"] for e in read_jsonl(run.out / "events.jsonl")].count("unaudited") == 1
    report = run.json
    assert sorted(s["session_id"] for s in report["sessions"]) == ["claude", "dead", "retried"]
    assert report["counts"]["pass_through"] == 1
    (listing,) = report["pass_through"]
    assert (listing["method"], listing["path"]) == ("GET", "/v1/models")
    text = run.text
    assert "passed through unaudited, in no session (not model traffic): GET /v1/models" in text
    assert "audit unsupported" not in text
    checked = cli_main("check", str(run.out))
    # Only the unreachable session fails; nothing about the listing.
    assert checked.returncode == 1
    assert "FAIL session dead" in checked.stdout
    assert "audit unsupported" not in checked.stdout
    assert "1 of 3 sessions failed the check." in checked.stdout
    assert cli_main("check", str(run.out), "--session", "claude").returncode == 0


def test_check_names_an_unknown_session(run: Run) -> None:
    checked = cli_main("check", str(run.out), "--session", "nope")
    assert checked.returncode == 1
    assert checked.stdout.splitlines() == [
        "FAIL session nope",
        "       no such session: 'nope' is not in this out dir "
        "(nothing reached the proxy in its name)",
        "       3 sessions in this out dir: retried, dead, claude",
        "1 of 1 session failed the check.",
    ]


def test_turn_numbers_count_from_one_everywhere(run: Run) -> None:
    checked = cli_main("check", str(run.out), "--session", "dead").stdout
    assert "[turns 1-3] no response: the upstream never answered" in checked
    assert "[turn 0]" not in checked
    (line,) = [s for s in read_jsonl(run.out / "sessions.jsonl") if s["session_id"] == "dead"]
    assert line["capture_errors"][0].startswith("[turn 1] ")
    text = run.text
    block = text.split("session retried", 1)[1]
    first_row = next(row for row in block.splitlines() if "gpt-5" in row)
    assert first_row.split()[0] == "1"


@pytest.mark.parametrize("command", ["report", "check", "view"])
def test_a_wrong_dir_says_what_to_give(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a new user types wrong: a dir that is not there (run in another
    directory), a file, an out dir no request reached (the files are made by
    their first line), one whose file cannot be read. One line each, exit 2
    for all three, never a traceback."""
    from modeltap.report import check, report, view

    main = {"report": report.main, "check": check.main, "view": view.main}[command]
    code = 2
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken" / "audit.jsonl").mkdir(parents=True)
    expected = {
        "missing": "no such directory: {} (give the --out directory of a run)",
        "a-file": "not a directory: {} (give the --out directory of a run)",
        "empty": "no audit.jsonl, events.jsonl or sessions.jsonl in {}: nothing was captured "
        "there (did the agent's requests go through the proxy, and is this the run's --out?)",
        "broken": "[Errno 21] Is a directory: '{}/audit.jsonl'",
    }
    for name, message in expected.items():
        assert main([str(tmp_path / name)]) == code
        err = capsys.readouterr().err
        assert err.splitlines() == [f"modeltap {command}: " + message.format(tmp_path / name)]


def test_without_dir_the_commands_read_where_run_writes(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run`` writes ./modeltap-out unless told: ``report``, ``check`` and
    ``view`` read it unless told, and say the same for it, missing or empty:
    one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    for state in ("missing", "empty"):
        if state == "empty":
            (tmp_path / "modeltap-out").mkdir()
        said = {}
        for command in ("report", "check", "view"):
            result = cli_main(command)
            assert result.returncode == 2, (command, state, result.stderr)
            (line,) = result.stderr.splitlines()
            said[command] = line.removeprefix(f"modeltap {command}: ")
        assert len(set(said.values())) == 1, said
        assert "modeltap-out" in said["view"]
    # And a capture there is read: run's default is theirs.
    (tmp_path / "modeltap-out").rmdir()
    shutil.copytree(run.out, tmp_path / "modeltap-out")
    here = cli_main("report").stdout
    assert here.startswith("modeltap report  modeltap-out\n")
    assert here.split("\n", 1)[1] == cli_main("report", str(run.out)).stdout.split("\n", 1)[1]
    assert cli_main("view", "-o", "-").stdout.startswith("<!doctype html>")


def test_usage_says_the_known_part_and_one_rule_for_its_status(run: Run) -> None:
    """Two attempts answered 500 (no usage), the third 21 in: the session's
    usage is partial (some turns reported), in the report, its JSON and the
    page alike; the text says what the turns that
    reported add up to, as the page does ("21 in 1 of 3 turns")."""
    retried = session_of(run.json, "retried")
    assert retried["token_usage"]["input_tokens"] is None  # unknown stays unknown
    assert retried["coverage"]["usage"]["status"] == "partial"
    page = build_view_data(Capture.load(run.out))
    (seen,) = [s for s in page["sessions"] if s["id"] == "retried"]
    assert seen["coverage"]["usage"]["status"] == "partial"  # the page reads the same
    block = run.text.split("session retried", 1)[1].split("\nsession ", 1)[0]
    (usage,) = [row for row in block.splitlines() if row.startswith("  usage ")]
    assert "in ? (21 in 1 of 3 turns)  out ? (5 in 1 of 3 turns)" in usage
    # No turn reported any: unavailable, and nothing to add up.
    dead = session_of(run.json, "dead")
    assert dead["coverage"]["usage"]["status"] == "unavailable"
    block = run.text.split("session dead", 1)[1].split("\nsession ", 1)[0]
    (usage,) = [row for row in block.splitlines() if row.startswith("  usage ")]
    assert " in " not in usage.split("  usage", 1)[1].replace("  in ?", "")
