"""Every line a command prints is escaped (issue 27.4): one way to print wire text.

Model names, session ids, tool names and paths come from the agent (and
from recordings, and the upstream's answers); printed raw, ``ESC ] 0 ;``
retitles the operator's terminal, ``ESC [ 2 J`` clears it, OSC 52 writes
its clipboard, the 8-bit CSI ``U+009B`` acts like ``ESC [`` on some
terminals, ``U+202E`` turns the rest of the line around, and a line break
forges a line of modeltap's own. ``modeltap replay`` printed a recorded
session id raw. Now every command and every stderr line prints through
:mod:`modeltap.report.terminal`; the source check below fails on a new
``print`` or ``sys.stdout.write`` anywhere else.
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import orjson
import pytest

from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.report.terminal import TerminalLogHandler, print_document, print_lines, printable
from tests.cli_process import cli_main
from tests.conftest import Running
from tests.upstream import Upstream, chat_text_json

SRC = Path(__file__).parents[1] / "src" / "modeltap"
#: The one module that writes to a terminal.
TERMINAL = SRC / "report" / "terminal.py"

#: What a terminal acts on, one of each kind (ESC sequences, BEL, C1, bidi, DEL, a line break).
FORGED = "12:00:00 forged openai.chat_completions gpt-5 200 in=1 out=1 1ms"
EVIL = f"e\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202e\u2066\x7f\x1b]52;c;eA==\x07\r\n{FORGED}"
#: What none of a command's output may hold.
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\x7f", "\r")


def raw_prints(source: str, name: str = "<test>") -> list[str]:
    """Where a module prints or writes to stdout/stderr by itself: ``print(...)``,
    ``sys.stdout`` / ``sys.stderr`` (or imported from ``sys``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "print":
                found.append(f"{name}:{node.lineno}: print")
        elif isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr"):
            if isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"{name}:{node.lineno}: sys.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            names = {alias.name for alias in node.names}
            found += (
                [f"{name}:{node.lineno}: from sys import"] if names & {"stdout", "stderr"} else []
            )
    return found


def test_only_the_terminal_module_prints() -> None:
    modules = [*SRC.rglob("*.py"), SRC.parents[1] / "addons" / "modeltap.py"]
    found = [
        hit
        for path in modules
        if path != TERMINAL
        for hit in raw_prints(path.read_text(), str(path.relative_to(SRC.parents[1])))
    ]
    assert found == [], "print through modeltap.report.terminal:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "snippet",
    [
        "print(model)",
        "import sys\nsys.stderr.write(session)",
        "import sys\nprint(x, file=sys.stdout)",
        "from sys import stderr\nstderr.write(x)",
        "def f():\n    sys.stdout.buffer.write(b'')",
    ],
)
def test_the_source_check_catches_a_raw_print(snippet: str) -> None:
    assert raw_prints(snippet)


# ---------------------------------------------------------------- the functions


def printed(capsys: pytest.CaptureFixture[str], call: Callable[[], None]) -> tuple[str, str]:
    call()
    out, err = capsys.readouterr()
    return out, err


def test_print_lines_escapes_each_line_and_forges_none(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = printed(capsys, lambda: print_lines(f"model {EVIL}", "next", stderr=True))
    assert out == "" and err.count("\n") == 2  # two lines, whatever the text held
    assert not any(c in err for c in RAW)
    assert not any(line.startswith(FORGED) for line in err.splitlines())
    assert "\\x1b]0;PWNED\\x07" in err and "\\u202e" in err and "\\x9b" in err
    assert printable(printable(EVIL)) == printable(EVIL)  # escaping twice changes nothing


def test_print_document_keeps_its_meaning(capsys: pytest.CaptureFixture[str]) -> None:
    value = {"model": EVIL, "plain": "caf\u00e9 \u4e2d", "emoji": "\U0001f600\u200f"}
    document = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    out, _ = printed(capsys, lambda: print_document(document + "\n"))
    assert not any(c in out for c in RAW) and "\u200f" not in out
    assert orjson.loads(out) == value  # a JSON reader reads the very same value
    assert "caf\u00e9 \u4e2d" in out and "\U0001f600" in out  # printable text stays as it is
    assert out.count("\n") == document.count("\n") + 1  # its own line breaks kept


def test_log_lines_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger("modeltap.test_terminal_output")
    handler = TerminalLogHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.info("quiet: %s", EVIL)  # below WARNING: not printed, as unconfigured Python
        logger.warning("a value from the wire: %s", EVIL)
        try:
            raise ValueError(EVIL)
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    _, err = capsys.readouterr()
    assert not any(c in err for c in RAW)
    assert "quiet" not in err and "a value from the wire: e\\x1b]0;PWNED" in err
    assert "Traceback (most recent call last):" in err.splitlines()  # its lines kept


# ---------------------------------------------------------------- through the commands


@pytest.fixture
def evil_capture(tmp_path: Path, upstream: Upstream) -> Iterator[Path]:
    """A capture whose session, model and tool names carry every kind of escape,
    recorded too (``--record``): the session is ``--session``, so it is in the
    recording as the replay will name it."""
    out, rec = tmp_path / "out", tmp_path / "rec"
    upstream.replies.append(chat_text_json(EVIL, text="hi"))
    config = ProxyConfig(
        listen_port=0, out=str(out), routes=[f"stub={upstream.url}"], record=str(rec),
        session=EVIL, quiet=True,
    )  # fmt: skip
    with Proxy(config) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/stub/v1", api_key="k", max_retries=0)
        tool = {"type": "function", "function": {"name": f"ls{EVIL[:20]}", "parameters": {}}}
        client.chat.completions.create(
            model=EVIL, messages=[{"role": "user", "content": "x"}], tools=[tool]
        )
    yield tmp_path


def assert_clean(*outputs: str) -> None:
    for output in outputs:
        assert not any(c in output for c in RAW), output[:300]
        assert not any(line.startswith(FORGED) for line in output.splitlines())


def test_report_check_and_view(evil_capture: Path) -> None:
    out = evil_capture / "out"
    report = cli_main("report", str(out))
    as_json = cli_main("report", str(out), "--json")
    check = cli_main("check", str(out))
    view = cli_main("view", str(out), "-o", "-")
    assert (report.returncode, as_json.returncode, view.returncode) == (0, 0, 0)
    assert_clean(report.stdout, as_json.stdout, check.stdout, view.stdout)
    assert_clean(report.stderr, as_json.stderr, check.stderr, view.stderr)
    (session,) = orjson.loads(as_json.stdout)["sessions"]
    assert session["session_id"] == EVIL  # escaped on the terminal, the same value for JSON
    assert "\\x1b]0;PWNED" in check.stdout


def test_session_end_prints_the_line_escaped(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    running = start_proxy(session=EVIL)
    ended = cli_main("session", "end", EVIL, "--out", str(running.out))
    assert_clean(ended.stdout, ended.stderr)
    assert orjson.loads(ended.stdout)["session_id"] == EVIL


def test_replay_prints_a_recorded_session_id_escaped(evil_capture: Path) -> None:
    """The issue's own example: `modeltap replay` printed the recorded session id raw
    (here: at exit, "session ...: not replayed", and the start-up screen)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "modeltap.app.cli", "replay", str(evil_capture / "rec"),
         "--listen", "127.0.0.1:0", "--out", str(evil_capture / "replayed"), "--check"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    screen = ""
    for line in proc.stderr:  # wait for the screen's last line, then stop it
        screen += line
        if line.lstrip().startswith("replaying"):
            break
    proc.send_signal(2)
    stdout, rest = proc.communicate(timeout=30)
    assert proc.returncode == 1  # --check: the recorded turn was not replayed
    assert_clean(stdout, screen + rest)
    assert "not replayed" in stdout and "e\\x1b]0;PWNED\\x07" in stdout


def test_the_console_script_escapes_what_python_prints_unhandled() -> None:
    before = logging.lastResort
    try:
        cli_main("check", "/nonexistent-out-dir")
        assert isinstance(logging.lastResort, TerminalLogHandler)
    finally:
        logging.lastResort = before
