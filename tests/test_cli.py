"""`modeltap run` as a user runs it: the start-up screen, per-exchange lines, Ctrl-C."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import openai
import orjson
import pytest

from tests.cli_process import cli_main
from tests.conftest import read_jsonl
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream


def test_run_screen_lines_and_ctrl_c_flush(upstream: Upstream, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = ProxyProcess("--out", str(out), "--route", f"stub={upstream.url}")
    try:
        client = openai.OpenAI(base_url=f"{p.url}/stub/v1", api_key="k", max_retries=0)
        client.chat.completions.create(
            model="gpt-5", messages=[], extra_headers={"x-modeltap-session": "cli-1"}
        )
        client.models.list(extra_headers={"x-modeltap-session": "cli-1"})
    finally:
        code = p.stop(signal.SIGINT)
    assert code == 0
    screen = p.stderr.decode()
    for expected in (
        f"listening  {p.url}  (reverse proxy)",
        "/openai     -> https://api.openai.com",
        "/anthropic  -> https://api.anthropic.com",
        f"/stub       -> {upstream.url}",
        f"OPENAI_BASE_URL={p.url}/openai/v1",
        f"ANTHROPIC_BASE_URL={p.url}/anthropic",
        f"files      {out / 'audit.jsonl'}  {out / 'events.jsonl'}  {out / 'sessions.jsonl'}",
        "control    http://127.0.0.1:",
        f"(modeltap session end ID --out {out}; token in the out dir)",
        "\n  spans      not exported (no OTLP endpoint",  # in the screen's columns
        "\n  logs       not exported (no OTLP endpoint, or --no-otlp-logs)",
        "timeouts   upstream connect 10 s, first byte 540 s, idle 540 s; client body idle 60 s",
        "Ctrl-C stops and flushes.",
    ):
        assert expected in screen, expected
    # One line per exchange on stderr, then the exit summary.
    assert " cli-1 openai.chat_completions gpt-5 200 in=21 out=5 " in screen
    assert " cli-1 - - 200 - - unaudited GET /v1/models" in screen
    assert "modeltap: stopped. audited 1, refused 0, unaudited 1, errors 0." in screen
    # Ctrl-C flushed everything: the record, its response, and the session's end.
    assert [r["session_id"] for r in read_jsonl(out / "audit.jsonl")] == ["cli-1"]
    assert [e["kind"] for e in read_jsonl(out / "events.jsonl")] == ["response", "unaudited"]
    (status,) = [s for s in read_jsonl(out / "sessions.jsonl") if s["session_id"] == "cli-1"]
    assert status["stop_reason"] == "completed"


def test_session_end_command(
    upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from modeltap.app import cli

    p = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}")
    try:
        client = openai.OpenAI(base_url=f"{p.url}/stub/v1", api_key="k", max_retries=0)
        client.chat.completions.create(
            model="gpt-5", messages=[], extra_headers={"x-modeltap-session": "harness-7"}
        )
        assert cli.main(["session", "end", "harness-7", "--out", str(tmp_path)]) == 0
        printed = orjson.loads(capsys.readouterr().out)
        assert (printed["session_id"], printed["stop_reason"]) == ("harness-7", "completed")
        assert printed["requests_audited"] == 1
        (line,) = read_jsonl(tmp_path / "sessions.jsonl")
        assert line == printed
    finally:
        p.stop()
    # The proxy is gone (and took its control file along): says so.
    assert not list(tmp_path.glob("control-*.json"))
    assert cli.main(["session", "end", "x", "--out", str(tmp_path)]) == 1
    assert "no running modeltap proxy writes to" in capsys.readouterr().err


def test_session_end_after_kill_9_says_what_is_left_to_do(
    upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A proxy killed with -9 leaves its control file; ending a session then says
    why it cannot be done, what check will say, and how to clear the files."""
    from modeltap.app import cli

    p = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}")
    try:
        client = openai.OpenAI(base_url=f"{p.url}/stub/v1", api_key="k", max_retries=0)
        client.chat.completions.create(
            model="gpt-5", messages=[], extra_headers={"x-modeltap-session": "job-9"}
        )
    finally:
        p.kill()
    assert len(list(tmp_path.glob("control-*.json"))) == 1  # left behind by the kill
    assert cli.main(["session", "end", "job-9", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"no running modeltap proxy writes to {tmp_path}" in err
    assert "killed" in err
    assert "cannot be ended now" in err
    assert "modeltap check" in err
    assert f"Delete {tmp_path / 'control-*.json'}" in err
    assert len(err.strip().splitlines()) == 1


def test_run_options_for_timeouts_reach_the_proxy_and_the_screen(
    upstream: Upstream, tmp_path: Path
) -> None:
    p = ProxyProcess(
        "--out", str(tmp_path), "--route", f"stub={upstream.url}",
        "--upstream-timeout", "first-byte=900,idle=2m", "--client-timeout", "5",
    )  # fmt: skip
    try:
        screen = p.stderr.decode()
    finally:
        assert p.stop(signal.SIGINT) == 0
    assert (
        "timeouts   upstream connect 10 s, first byte 900 s, idle 120 s; client body idle 5 s"
        in (screen)
    )


@pytest.mark.parametrize(
    "args",
    [["--upstream-timeout", "read=5"], ["--upstream-timeout", "idle=0"], ["--client-timeout", "x"]],
)
def test_run_refuses_bad_timeouts(args: list[str]) -> None:
    done = cli_main("run", *args)
    assert done.returncode == 2
    assert "timeout" in done.stderr.splitlines()[-1]


def test_the_console_script_runs_and_its_exit_code_reaches_the_shell() -> None:
    """What only a process shows: the installed ``modeltap`` script, a usage error's
    exit code 2 and argparse's line on the process's own stderr."""
    script = shutil.which("modeltap", path=str(Path(sys.executable).parent))
    assert script is not None, "the modeltap console script is not installed beside python"
    done = subprocess.run(
        [script, "run", "--client-timeout", "x"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("modeltap run: error: argument --client-timeout")


def test_otlp_logs_is_on_unless_switched_off() -> None:
    from modeltap.app.cli import build_parser, config_from_args

    def config(*argv: str) -> bool:
        return config_from_args(build_parser().parse_args(["run", *argv])).otlp_logs

    assert config() is True
    assert config("--otlp-logs") is True
    assert config("--no-otlp-logs") is False
    mitm = config_from_args(build_parser().parse_args(["run", "--no-otlp-logs"])).mitm_options()
    assert mitm["modeltap_otlp_logs"] is False


def test_run_says_where_log_records_go_and_what_arrived(upstream: Upstream, tmp_path: Path) -> None:
    from tests.otlp_receiver import HttpReceiver

    with HttpReceiver() as receiver:
        p = ProxyProcess(
            "--out", str(tmp_path), "--route", f"stub={upstream.url}", "--otlp", receiver.endpoint
        )  # fmt: skip
        try:
            client = openai.OpenAI(base_url=f"{p.url}/stub/v1", api_key="k", max_retries=0)
            client.chat.completions.create(model="gpt-5", messages=[])
        finally:
            assert p.stop(signal.SIGINT) == 0
        received = len(receiver.logs)
    screen = p.stderr.decode()
    logs_url = f"{receiver.endpoint}/v1/logs"
    assert f"  logs       audit, events and sessions lines -> OTLP/HTTP -> {logs_url}" in screen
    # audit, response and the session's line: each a record, and the exit screen says so.
    assert received == 3
    assert f"modeltap: logs: 3 of 3 lines exported, 0 dropped (OTLP/HTTP -> {logs_url})" in screen
    assert "modeltap: spans: " in screen


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        (("--port", "9000"), "--listen 127.0.0.1:9000"),
        (("--port=9000",), "--listen 127.0.0.1:9000"),
        (("--host", "0.0.0.0"), "--listen 0.0.0.0:8787"),
    ],
)
@pytest.mark.parametrize("command", ["run", "replay"])
def test_a_guessed_port_option_gets_one_line_naming_listen(
    command: str, args: tuple[str, ...], fix: str, tmp_path: Path
) -> None:
    """``modeltap run --port 9000``: one line naming the fix, not the top-level usage."""
    before = (str(tmp_path),) if command == "replay" else ()
    result = cli_main(command, *before, *args)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"modeltap {command}: there is no {args[0].partition('=')[0]} option")
    assert fix in line
    assert "usage:" not in result.stderr


def test_listen_takes_a_port_alone_for_loopback(tmp_path: Path) -> None:
    """``--listen PORT`` is that port on 127.0.0.1: the screen says where it listens."""
    from tests.cli_process import CliProcess

    with socket.socket() as probe:  # a free port, given as a bare number
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with CliProcess("run", "--out", str(tmp_path), "--listen", str(port)) as cli:
        assert f"listening  http://127.0.0.1:{port}  (reverse proxy)" in cli.screen
    assert "--listen 9000 is 127.0.0.1:9000" in " ".join(cli_main("run", "--help").stdout.split())
