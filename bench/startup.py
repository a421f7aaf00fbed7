"""Start-up figures: ``modeltap run`` (and bare mitmdump) to accepting connections,
and the pytest ``modeltap`` fixture's cost per test.

The fixture is measured in a real pytest session in a subprocess: a test file
of ``n`` tests using the fixture and ``n`` tests using only ``tmp_path``; a
small conftest records each test's setup, call and teardown time. The cost
per test is the median of the fixture tests after the first, less the median
of the plain ones; the first pays the import of mitmproxy and is reported on
its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_with_fixture(modeltap, i):
    assert modeltap.url.startswith("http://127.0.0.1:")

@pytest.mark.parametrize("i", range({n}))
def test_without(tmp_path, i):
    assert tmp_path.exists()
"""

CONFTEST = """
import json, os

_durations = {}

def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration

def pytest_sessionfinish(session):
    with open(os.environ["BENCH_DURATIONS"], "w") as f:
        json.dump(_durations, f)
"""


def time_to_listen(cmd: list[str], port: int, env: dict[str, str], timeout: float = 30) -> float:
    """Seconds from spawning ``cmd`` to a TCP connect on ``port`` succeeding; then stop it."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while time.perf_counter() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited before listening")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return time.perf_counter() - t0
            time.sleep(0.002)
        raise RuntimeError(f"{cmd[0]} did not listen within {timeout} s")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def fixture_cost(n: int, env: dict[str, str]) -> dict[str, float]:
    """The ``modeltap`` fixture's cost per test and for the first test (seconds)."""
    with tempfile.TemporaryDirectory(prefix="modeltap-fixture-") as tmp:
        work = Path(tmp)
        (work / "test_fixture_cost.py").write_text(TESTS.format(n=n))
        (work / "conftest.py").write_text(CONFTEST)
        out = work / "durations.json"
        # The plugin of the measured tree, not the installed one's entry point
        # (``--modeltap-src`` may name a tree from before the plugin moved).
        run_env = {**env, "BENCH_DURATIONS": str(out), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        run_env.pop("PYTEST_ADDOPTS", None)
        plugin = _plugin_module(Path(env["PYTHONPATH"]) if "PYTHONPATH" in env else None)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                plugin,
                str(work),
            ],
            cwd=work,
            env=run_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=True,
        )
        durations: dict[str, float] = json.loads(out.read_text())
    with_f = [v for k, v in durations.items() if "test_with_fixture" in k]
    without = [v for k, v in durations.items() if "test_without" in k]
    order = sorted(durations.items(), key=lambda kv: kv[0])
    first = next(v for k, v in order if "test_with_fixture[0]" in k)
    per = statistics.median(
        [v for k, v in durations.items() if "test_with_fixture" in k and "[0]" not in k]
    )
    assert with_f and without
    return {"per_test_s": max(0.0, per - statistics.median(without)), "first_s": first}


def _plugin_module(src: Path | None) -> str:
    """The pytest plugin's module in tree ``src`` (None: the installed tree)."""
    if src is not None and not (src / "modeltap" / "app" / "pytest_plugin.py").exists():
        return "modeltap.pytest_plugin"
    return "modeltap.app.pytest_plugin"


def child_env(src: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env
