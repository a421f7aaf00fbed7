"""Fixtures of the reliability suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.test_processes import ProxyProcess


@pytest.fixture
def processes() -> Iterator[list[ProxyProcess]]:
    """The ``modeltap run`` processes a test starts (append them): killed at teardown."""
    started: list[ProxyProcess] = []
    yield started
    for p in started:
        p.kill()
