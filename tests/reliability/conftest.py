"""Fixtures of the reliability suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream


@pytest.fixture
def processes() -> Iterator[list[ProxyProcess]]:
    """The ``modeltap run`` processes a test starts (append them): killed at teardown."""
    started: list[ProxyProcess] = []
    yield started
    for p in started:
        p.kill()


@pytest.fixture
def stub_process(tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]) -> ProxyProcess:
    """A ``modeltap run`` process writing to ``tmp_path``, the stub mounted at ``/stub``."""
    proc = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}", "-q")
    processes.append(proc)
    return proc


@pytest.fixture
def stub_openai(stub_process: ProxyProcess) -> openai.OpenAI:
    """The ``openai`` SDK pointed at :func:`stub_process`'s stub route, no retries."""
    return openai.OpenAI(base_url=stub_process.url + "/stub/v1", api_key="sk-test", max_retries=0)
