"""``modeltap run`` (or ``replay``) as a user starts it: a real process, its
start-up screen and its stderr lines read as they come; and the CLI called in
this process (:func:`cli_main`) where only its exit code and output count."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from unittest import mock

_LISTENING = re.compile(r"listening\s+http://\S+:(\d+)")
_END_OF_SCREEN = "Ctrl-C stops and flushes."


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m modeltap.app.cli ARGS`` run until it exits (a minute at most),
    its output read as text."""
    return subprocess.run(
        [sys.executable, "-m", "modeltap.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def cli_main(*args: str) -> subprocess.CompletedProcess[str]:
    """``modeltap ARGS`` called in this process (the console script's ``main``), its
    exit code and output as :func:`run_cli` gives them, without a process start.

    For what exits before a proxy starts (argparse's usage errors, ``report``,
    ``check``, ``session end``, a refused ``run``): a proxy started in-process
    would log through handlers that write to the real stderr, which this does
    not read, and ``run`` would not return. So a command that goes on to start
    one fails instead (``run`` answers the AssertionError with exit code 1).
    """
    from modeltap.app import cli
    from modeltap.app.proxy import Proxy

    def no_proxy(*_: object, **__: object) -> None:
        raise AssertionError(f"modeltap {' '.join(args)} went on to start a proxy")

    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(Proxy, "run_foreground", no_proxy),
        mock.patch.object(Proxy, "start", no_proxy),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = cli.main(list(args))
        except SystemExit as e:  # argparse's errors and --help, as the interpreter exits
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(["modeltap", *args], code, out.getvalue(), err.getvalue())


class CliProcess:
    """``python -m modeltap.app.cli COMMAND ... --listen 127.0.0.1:0``, started and
    read until its start-up screen is whole (the port is read off it)."""

    def __init__(self, command: str, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "modeltap.app.cli", command, "--listen", "127.0.0.1:0", *args]
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=environ, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._screen_done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._screen_done.wait(60):
            self.stop()
            raise RuntimeError("modeltap did not start:\n" + "\n".join(self.lines))
        found = _LISTENING.search(self.screen)
        assert found, self.screen
        self.port = int(found.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))
            if line.strip() == _END_OF_SCREEN:
                self._screen_done.set()
        self._screen_done.set()

    @property
    def screen(self) -> str:
        """The start-up screen, up to its last line."""
        with self._lock:
            lines = list(self.lines)
        marker = f"  {_END_OF_SCREEN}"
        return "\n".join(lines[: lines.index(marker) + 1] if marker in lines else lines)

    def after_screen(self) -> list[str]:
        """The lines printed after the start-up screen, so far."""
        with self._lock:
            lines = list(self.lines)
        marker = f"  {_END_OF_SCREEN}"
        return lines[lines.index(marker) + 1 :] if marker in lines else []

    def wait_for_line(self, matches: Callable[[str], bool], timeout: float = 30) -> str:
        """The first line after the screen that ``matches``, waiting for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.after_screen():
                if matches(line):
                    return line
            time.sleep(0.02)
        raise AssertionError("no such line; got:\n" + "\n".join(self.after_screen()))

    def stop(self) -> int:
        """Ctrl-C, and the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def __enter__(self) -> CliProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
