"""Shared fixtures: the upstream stub, the proxy in a background thread, JSONL readers,
and the exchange core alone (``core``); the hypothesis profiles."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import settings
from mitmproxy.certs import CertStore

from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.core.notices import NOTICES, ExchangeView, Listener
from modeltap.core.run import Run
from modeltap.evidence.sink import Sink
from tests.upstream import Upstream

# Every property test's budget, in one place. ``dev`` (the default) keeps a run
# while working quick; ``ci`` (HYPOTHESIS_PROFILE=ci, which .ci/run sets)
# searches ten times as far. No deadline in either: on two shared cores an
# example's time is noise, not a finding. A test sets its own max_examples only
# when it needs more than the profile, and says why.
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config: pytest.Config) -> None:
    """mitmproxy's CA in ``~/.mitmproxy`` (where a proxy without a ``confdir`` and
    ``modeltap run`` keep it), made once before any test runs. ``make test``'s
    workers (pytest-xdist) would otherwise each make it at their first proxy on a
    fresh machine, and one could read the files another is still writing."""
    if not hasattr(config, "workerinput"):  # the controller, or a run without workers
        CertStore.from_store(Path("~/.mitmproxy").expanduser(), "mitmproxy", 2048)


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


def intercepting_proxy(tmp_path: Path, routes: list[str], **options: Any) -> Proxy:
    """A proxy in regular mode (``HTTPS_PROXY`` clients, TLS intercepted) writing
    to ``tmp_path/out``; it trusts the stubs' self-signed certificates, and
    clients trust it by :func:`proxy_ca`. Not started: use it in a ``with``."""
    config = ProxyConfig(
        listen_port=0,
        out=str(tmp_path / "out"),
        mode="regular",
        routes=routes,
        quiet=True,
        extra={"confdir": str(tmp_path / "mitmproxy"), "ssl_insecure": True},
        **options,
    )
    return Proxy(config)


def proxy_ca(tmp_path: Path) -> Path:
    """The CA certificate an :func:`intercepting_proxy` signs its TLS with."""
    return tmp_path / "mitmproxy" / "mitmproxy-ca-cert.pem"


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


# ---------------------------------------------------------------- the core, alone


def exchange_view(**fields: Any) -> ExchangeView:
    """A view of an HTTP chat exchange (``f1`` in session ``s1``), fields overridden."""
    values: dict[str, Any] = {
        "id": "f1",
        "session_id": "s1",
        "request_id": "r1",
        "transport": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "route": None,
        "upstream": "https://api.openai.com",
        "api": "openai.chat_completions",
    }
    return ExchangeView(**(values | fields))


class Heard(Listener):
    """Every notice a run published, in order, as ``(name, args)``.

    ``answers`` gives what a notice returns (e.g. ``forwarding``: a Reply).
    """

    def __init__(self) -> None:
        self.notices: list[tuple[str, tuple[Any, ...]]] = []
        self.answers: dict[str, Any] = {}

    def names(self) -> list[str]:
        return [name for name, _ in self.notices]

    def args(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.notices if n == name]


def _hear(name: str) -> Callable[..., Any]:
    def notice(self: Heard, *args: Any) -> Any:
        self.notices.append((name, args))
        return self.answers.get(name)

    return notice


for _name in NOTICES:
    setattr(Heard, _name, _hear(_name))


class Core:
    """A :class:`Run` writing into a temp dir, with a listener that hears everything."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.run = Run("run-1")
        self.run.sink = Sink(out)
        self.run.sink.prepare()
        self.heard = Heard()
        self.run.listeners.subscribe(self.heard)

    def audit(self) -> list[dict[str, Any]]:
        return read_jsonl(self.out / "audit.jsonl")

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = read_jsonl(self.out / "events.jsonl")
        return [e for e in lines if kind is None or e["kind"] == kind]

    def sessions(self) -> list[dict[str, Any]]:
        return read_jsonl(self.out / "sessions.jsonl")


@pytest.fixture
def core(tmp_path: Path) -> Core:
    return Core(tmp_path / "out")
