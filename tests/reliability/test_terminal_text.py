"""Text from the wire on the operator's terminal (SPEC 1: one line per exchange on stderr).

The agent names the model, the session and the tools; the upstream names the
response's model. Printed as they came, an escape sequence in one acts on the
terminal of whoever watches the run (``ESC ] 0 ;`` retitles it, ``ESC [ 2 J``
clears it, OSC 52 writes the clipboard) and a line break forges a line of
modeltap's own. Sent through a real ``modeltap run`` process with the
``openai`` SDK, then read back with ``modeltap report`` and ``modeltap check``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import openai
import pytest

from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream

FORGED = "13:00:00 forged openai.chat_completions gpt-5 200 in=1 out=1 1ms"
MODEL = f"gpt-5\x1b]0;PWNED\x07\x1b[2J\r\n{FORGED}\u202e"
#: Control bytes are no header's (refused, invalid_header_bytes: the refusal is
#: filed in this session all the same); UTF-8 is: a C1 CSI and a bidi override.
SESSION = "s\x1b[31mred\x1b]52;c;cm0gLXJmIH4=\x07"
UTF8_SESSION = "u\u009b31mred\u202e"
TOOL = "ls\x1b[8m"


def test_wire_text_reaches_no_terminal_as_control_characters(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    """Before: the stderr line carried ESC, BEL and CR LF as sent, and the forged
    line stood on a line of its own; `report` printed the tool name's ESC too."""
    proc = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}")
    processes.append(proc)
    client = openai.OpenAI(
        base_url=proc.url + "/stub/v1",
        api_key="sk-test",
        max_retries=0,
        # httpx sends str headers as ASCII; the session goes as its UTF-8 bytes.
        http_client=httpx.Client(headers={"x-modeltap-session": UTF8_SESSION.encode()}),
    )
    tool = {"type": "function", "function": {"name": TOOL, "parameters": {}}}
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=[tool],  # type: ignore[list-item]
    )
    with pytest.raises(openai.BadRequestError, match="invalid_header_bytes"):
        client.chat.completions.create(
            model="gpt-5",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-modeltap-session": SESSION},
        )
    assert proc.stop() == 0
    report = subprocess.run(
        [sys.executable, "-m", "modeltap.app.cli", "report", str(tmp_path)],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    check = subprocess.run(
        [sys.executable, "-m", "modeltap.app.cli", "check", str(tmp_path)], capture_output=True
    ).stdout
    for printed in (proc.stderr, report, check):
        assert b"\x1b" not in printed and b"\x07" not in printed and b"\r" not in printed
        assert "\u202e".encode() not in printed and "\u009b".encode() not in printed
        assert not any(line.startswith(FORGED.encode()) for line in printed.splitlines())
    # Still shown, escaped: the operator sees what was sent.
    assert b"gpt-5\\x1b]0;PWNED\\x07" in proc.stderr
    assert b"s\\x1b[31mred" in check and b"u\\x9b31mred\\u202e" in check
