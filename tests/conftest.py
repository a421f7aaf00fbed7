"""Shared fixtures: the upstream stub, the proxy in a background thread, JSONL readers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap.proxy import Proxy, ProxyConfig
from tests.upstream import Upstream


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed; a missing file reads as no lines."""
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


class Running:
    """A proxy started for one test, with the stub mounted at ``/stub``."""

    def __init__(self, proxy: Proxy, out: Path, upstream: Upstream) -> None:
        self.proxy = proxy
        self.out = out
        self.upstream = upstream

    @property
    def url(self) -> str:
        return self.proxy.url

    def base(self, route: str = "stub") -> str:
        return f"{self.proxy.url}/{route}"

    def audit(self) -> list[dict[str, Any]]:
        return read_jsonl(self.out / "audit.jsonl")

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = read_jsonl(self.out / "events.jsonl")
        return [e for e in lines if kind is None or e["kind"] == kind]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as stub:
        yield stub


@pytest.fixture
def start_proxy(tmp_path: Path, upstream: Upstream) -> Iterator[Callable[..., Running]]:
    """Start a proxy with ``route stub=<upstream>`` plus any ProxyConfig fields."""
    started: list[Proxy] = []

    def start(**kwargs: Any) -> Running:
        out = tmp_path / f"out{len(started)}"
        routes = [f"stub={upstream.url}", *kwargs.pop("routes", [])]
        kwargs.setdefault("quiet", True)
        cfg = ProxyConfig(listen_port=0, out=str(out), routes=routes, **kwargs)
        proxy = Proxy(cfg).start()
        started.append(proxy)
        return Running(proxy, out, upstream)

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def running(start_proxy: Callable[..., Running]) -> Running:
    """A proxy with default options."""
    return start_proxy()
