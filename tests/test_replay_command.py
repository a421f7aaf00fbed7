"""`modeltap replay` as a user runs it: where its files go, what its start-up
screen says, and what its diff says when the agent changed.

The recording is made through modeltap with the real openai SDK against the
stub (then the stub is stopped); the replay is the real command, a
subprocess, driven by the same SDK.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.cli_process import cli_main
from tests.conftest import read_jsonl
from tests.test_record_replay import oai, record
from tests.upstream import Upstream, chat_text_json

SESSION = {"x-modeltap-session": "tasks"}
QUESTIONS = ("What is 2+2?", "Name a colour.", "Spell cat.")
_LISTENING = re.compile(r"listening\s+(http://127\.0\.0\.1:(\d+))")


class ReplayProcess:
    """``modeltap replay REC ...`` in ``cwd``; stderr collected whole, the
    listening URL read off the start-up screen."""

    def __init__(self, rec: Path, cwd: Path, *args: str) -> None:
        cmd = [sys.executable, "-m", "modeltap.app.cli", "replay", str(rec)]
        cmd += ["--listen", "127.0.0.1:0", "--fast", *args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.stderr = ""
        self.stdout = ""
        self.url = ""
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._out_reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._out_reader.start()
        if not self._ready.wait(30) or not self.url:
            self.proc.kill()
            raise RuntimeError(f"modeltap replay did not start: {self.stderr}")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line
            found = _LISTENING.search(line)
            if found and not self.url:
                self.url = found.group(1)
            if line.lstrip().startswith("replaying"):  # the screen's last line
                self._ready.set()
        self._ready.set()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout += line

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then the exit code and stdout (the diff with --check); stderr
        is whole once the process is gone."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self._reader.join(10)
        self._out_reader.join(10)
        return code, self.stdout


@pytest.fixture
def replays() -> Iterator[list[ReplayProcess]]:
    started: list[ReplayProcess] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(10)


def tasks(questions: tuple[str, ...]) -> Callable[[str], list[Any]]:
    """An eval loop in one session: each question is its own chat request, and a
    failed one does not stop the loop (its error is the result)."""

    def run(base: str) -> list[Any]:
        client = oai(base, default_headers=SESSION)
        out: list[Any] = []
        for question in questions:
            try:
                answer = client.chat.completions.create(
                    model="gpt-5",
                    messages=[
                        {"role": "system", "content": "Answer in one word."},
                        {"role": "user", "content": question},
                    ],
                )
                out.append(answer.choices[0].message.content)
            except openai.BadRequestError as e:
                out.append(e.body)
        return out

    return run


def recorded_tasks(tmp_path: Path, upstream: Upstream) -> Path:
    replies = [chat_text_json("gpt-5", text=f"answer {i}") for i in range(len(QUESTIONS))]
    recorded = record(tmp_path, upstream, tasks(QUESTIONS), replies)
    assert recorded.results == ["answer 0", "answer 1", "answer 2"]
    return recorded.dir


# ---------------------------------------------------------------- where files go, the screen


def test_replay_writes_its_own_out_dir_and_its_screen_names_no_internal_port(
    tmp_path: Path, upstream: Upstream, replays: list[ReplayProcess]
) -> None:
    rec = recorded_tasks(tmp_path, upstream)
    cwd = tmp_path / "work"
    cwd.mkdir()
    replays.append(p := ReplayProcess(rec, cwd))  # no --out: the default
    assert tasks(QUESTIONS)(p.url + "/stub") == ["answer 0", "answer 1", "answer 2"]
    code, _ = p.stop()
    assert code == 0, p.stderr
    # Its own directory: a replay never appends to a run's ./modeltap-out.
    assert sorted(x.name for x in cwd.iterdir()) == ["modeltap-replay"]
    assert len(read_jsonl(cwd / "modeltap-replay" / "audit.jsonl")) == 3
    screen = p.stderr
    assert (
        "files      modeltap-replay/audit.jsonl  modeltap-replay/events.jsonl  "
        "modeltap-replay/sessions.jsonl"
    ) in screen
    # The routes say what answers them: the recording, and where it was recorded from.
    assert f"/stub       -> the recording (3 turns recorded from {upstream.url})" in screen
    assert "/openai     -> the recording (no turn recorded)" in screen
    assert f"{p.url}/stub" in screen  # the base URL to export
    ports = {int(port) for port in re.findall(r"127\.0\.0\.1:(\d+)", screen)}
    proxy_port, control_port = int(p.url.rsplit(":", 1)[1]), _control_port(screen)
    # Only the proxy, the control listener and the recorded upstream are named;
    # the replay's own stand-in upstream never is.
    assert ports <= {proxy_port, control_port, int(upstream.url.rsplit(":", 1)[1])}
    assert "(3 turns in 1 session)" in screen
    assert "replayed 3 of 3 recorded turns; 0 differences, 0 not replayed" in screen


def _control_port(screen: str) -> int:
    found = re.search(r"control\s+http://127\.0\.0\.1:(\d+)", screen)
    assert found, screen
    return int(found.group(1))


def test_replay_help_names_its_default_out_dir() -> None:
    done = cli_main("replay", "--help")
    assert done.returncode == 0, done.stderr
    assert "Default: ./modeltap-replay." in " ".join(done.stdout.split())


# ---------------------------------------------------------------- what the diff says


def test_a_changed_user_message_is_a_json_path_with_sizes(
    tmp_path: Path, upstream: Upstream, replays: list[ReplayProcess]
) -> None:
    rec = recorded_tasks(tmp_path, upstream)
    changed = ("What is 2+2?", "Name a colour, please.", "Spell cat.")
    replays.append(p := ReplayProcess(rec, tmp_path, "--out", "out", "--check"))
    result = tasks(changed)(p.url + "/stub")
    code, stdout = p.stop()
    assert code == 1
    # One change, one answer error; the turns after it still line up.
    assert result[0] == "answer 0" and result[2] == "answer 2"
    line = "session tasks turn 2: messages[1].content: 14 -> 22 bytes"
    assert line in result[1]["message"]
    assert "colour" not in result[1]["message"]  # no content without --show-content
    assert stdout.splitlines() == [line]
    assert "replayed 2 of 3 recorded turns; 1 difference, 0 not replayed" in p.stderr
    (diff,) = read_jsonl(tmp_path / "out" / "replay-diff.jsonl")
    assert (diff["kind"], diff["message"], diff["turn"]) == ("mismatch", line, 2)
    assert "content" not in diff and "sha256" not in diff["message"]


def test_show_content_shows_the_values_in_the_diff_only(
    tmp_path: Path, upstream: Upstream, replays: list[ReplayProcess]
) -> None:
    rec = recorded_tasks(tmp_path, upstream)
    changed = ("What is 2+2?", "Name a colour, please.", "Spell cat.")
    replays.append(p := ReplayProcess(rec, tmp_path, "--out", "out", "--show-content"))
    result = tasks(changed)(p.url + "/stub")
    p.stop()
    shown = 'messages[1].content: "Name a colour." -> "Name a colour, please."'
    assert f"    {shown}" in p.stderr.splitlines()
    (diff,) = read_jsonl(tmp_path / "out" / "replay-diff.jsonl")
    assert diff["content"] == [shown]
    # The agent's error never carries content, flag or not.
    assert "colour" not in result[1]["message"]
    assert result[2] == "answer 2"


@pytest.mark.parametrize(
    ("asked", "expected", "line"),
    [
        (
            # The agent added a request before task 2: one line, then back in step.
            ("What is 2+2?", "Summarise the session.", "Name a colour.", "Spell cat."),
            ["answer 0", None, "answer 1", "answer 2"],
            "session tasks turn 2: messages[1].content: 14 -> 22 bytes",
        ),
        (
            # The agent left task 2 out: one line, task 3 still answered.
            ("What is 2+2?", "Spell cat."),
            ["answer 0", "answer 2"],
            "session tasks: recorded turn 2 was not asked for (turn 2 asked for recorded turn 3)",
        ),
    ],
    ids=["inserted", "deleted"],
)
def test_one_change_gives_one_diff_line(
    tmp_path: Path,
    upstream: Upstream,
    replays: list[ReplayProcess],
    asked: tuple[str, ...],
    expected: list[str | None],
    line: str,
) -> None:
    rec = recorded_tasks(tmp_path, upstream)
    replays.append(p := ReplayProcess(rec, tmp_path, "--out", "out", "--check"))
    result = tasks(asked)(p.url + "/stub")
    code, stdout = p.stop()
    assert [r if isinstance(r, str) else None for r in result] == expected
    assert code == 1
    assert stdout.splitlines() == [line]
    assert len(read_jsonl(tmp_path / "out" / "replay-diff.jsonl")) == 1


def test_a_recorded_upstream_is_the_route_at_root_on_the_replay_screen(
    tmp_path: Path, upstream: Upstream, replays: list[ReplayProcess]
) -> None:
    """Replay has no ``--upstream``: a run recorded with one shows its route
    as ``route /``, and its export line, used as printed, is answered."""
    from modeltap.app.proxy import Proxy, ProxyConfig

    upstream.replies.append(chat_text_json("gpt-5", text="answer 0"))
    rec = tmp_path / "recording"
    cfg = ProxyConfig(
        listen_port=0, out=str(tmp_path / "out"), upstream=upstream.url, record=str(rec),
        quiet=True,
    )  # fmt: skip
    with Proxy(cfg) as proxy:
        assert tasks(QUESTIONS[:1])(proxy.url) == ["answer 0"]
    upstream.stop()
    replays.append(p := ReplayProcess(rec, tmp_path))
    assert "--upstream" not in p.stderr
    found = re.search(r"OPENAI_BASE_URL=(\S+)  \(route /, if it speaks OpenAI\)", p.stderr)
    assert found, p.stderr
    assert tasks(QUESTIONS[:1])(found.group(1).removesuffix("/v1")) == ["answer 0"]
    code, _ = p.stop()
    assert code == 0, p.stderr
