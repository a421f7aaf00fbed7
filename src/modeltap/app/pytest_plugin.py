"""pytest plugin (entry point ``pytest11``): run modeltap for one test.

Installing modeltap registers this plugin. The ``modeltap`` fixture starts the
proxy in the test's own process, on a free port of 127.0.0.1, writing into
``tmp_path / "modeltap"``, and stops it when the test ends::

    def test_agent(modeltap):
        client = openai.OpenAI(base_url=modeltap.openai_base_url)
        run_my_agent(client)

        assert modeltap.expect.tool_called("get_weather", city="Paris")
        assert modeltap.expect.tool_not_called("delete_account")

Configuration, later entries winning key by key. The keys are ``modeltap
run``'s options (:data:`modeltap.app.options.OPTIONS`), as the fields of
:class:`modeltap.app.proxy.ProxyConfig` name them or as the command line spells
them: ``listen="127.0.0.1:0"`` or ``listen_port=0``, ``route=[...]`` or
``routes=[...]``, ``max_body`` or ``max-body``:

1. ``modeltap_upstream = URL`` in the ini file (``[tool.pytest.ini_options]``),
   then ``--modeltap-upstream URL`` on the command line: the one-route
   shorthand mounted at ``/`` (like ``modeltap run --upstream``);
   ``modeltap.openai_base_url`` then leads to it (``modeltap.url + "/v1"``
   for an OpenAI-compatible server), as ``modeltap run``'s screen says.
2. The ``modeltap_config`` fixture: a dict, empty by default. Override it
   (in a test module or ``conftest.py``) when the options depend on other
   fixtures, such as a stub upstream's port::

       @pytest.fixture
       def modeltap_config(model_stub):
           return {"routes": [f"openai={model_stub.url}"]}

3. ``@pytest.mark.modeltap(**options)`` on the test (or its class or module;
   the closest marker wins), e.g.
   ``@pytest.mark.modeltap(routes=["vllm=http://127.0.0.1:8000"], strict=True)``.

The proxy is quiet (no line per exchange on stderr) unless a marker or
``modeltap_config`` says ``quiet=False``. The default routes stay in place:
without an upstream, ``modeltap.openai_base_url`` goes to
``https://api.openai.com`` unless a route named ``openai`` replaces it.

Verdicts (``modeltap.expect``, ``capture.expect``, any ``Verdict`` a test
makes) are watched: a failing test shows, under "modeltap verdicts", the full
text of each verdict it made that did not pass (``assert v`` alone prints one
line), and the terminal summary lists every ``unavailable`` verdict of every
test, optional ones too, so a collection gap is never silent.

Importing this module does not import mitmproxy: the proxy is loaded by the
fixture, so pytest starts as fast as before in projects that never use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from modeltap.app.client_env import ExportLine
    from modeltap.app.proxy import Proxy
    from modeltap.evidence.capture import Capture
    from modeltap.evidence.records import SessionStatus
    from modeltap.evidence.verdicts import Expect, Verdict
    from modeltap.report.types import Report

MARKER = "modeltap"
INI_UPSTREAM = "modeltap_upstream"
#: Where the verdicts a test made are kept (per item) and the unavailable ones (per run).
_MADE = pytest.StashKey[list["Verdict"]]()
_UNAVAILABLE = pytest.StashKey[list[tuple[str, "Verdict"]]]()


@dataclasses.dataclass(frozen=True, slots=True)
class ModelTapFixture:
    """What the ``modeltap`` fixture yields: where the proxy listens and what it wrote."""

    #: ``http://127.0.0.1:PORT`` of the running proxy.
    url: str
    #: The proxy's output directory (``audit.jsonl``, ``events.jsonl``).
    out_dir: Path
    #: What ``modeltap run`` would print to export for these routes.
    exports: tuple[ExportLine, ...] = ()
    #: The proxy's ``record`` directory when it records (``record=...``), else None.
    record_dir: Path | None = None

    @property
    def openai_base_url(self) -> str:
        """Base URL for OpenAI SDKs, as the start-up screen's ``OPENAI_BASE_URL``:
        ``url + "/openai/v1"``, or with an upstream at ``/`` (``upstream=`` or
        ``--modeltap-upstream``) that upstream's, e.g. ``url + "/v1"``."""
        return self._export("OPENAI_BASE_URL", "openai") or f"{self.url}/openai/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for Anthropic SDKs, as the screen's ``ANTHROPIC_BASE_URL``:
        ``url + "/anthropic"``, or an upstream at ``/``'s, e.g. ``url``."""
        return self._export("ANTHROPIC_BASE_URL", "anthropic") or f"{self.url}/anthropic"

    def _export(self, variable: str, route: str) -> str | None:
        """The value of ``variable`` for the route of that name, else for the first
        route that has one."""
        values = [(e.route != route, e.value) for e in self.exports if e.variable == variable]
        return min(values, key=lambda pair: pair[0])[1] if values else None

    def base_url(self, route: str) -> str:
        """Return the proxy URL of a route: ``base_url("vllm")`` is ``url + "/vllm"``.

        Args:
            route: a route name (``openai``, ``anthropic`` or one from ``routes``).
        """
        return f"{self.url}/{route.strip('/')}"

    def capture(self) -> Capture:
        """Read the output directory as it is now.

        Lines are appended while the test runs, so call this again after the
        agent's next request rather than keeping an old capture. Before any
        request reached the proxy, the capture is empty and its
        ``capture_errors`` say so.

        When the proxy records (``record=DIR``), each turn's output text is
        read from the recording (``final_text_contains`` needs it).

        Returns:
            A fresh :class:`modeltap.evidence.capture.Capture`.
        """
        from modeltap.evidence.capture import Capture

        recorded = self.record_dir is not None and (self.record_dir / "recording.jsonl").exists()
        try:
            return Capture.load(self.out_dir, record=self.record_dir if recorded else None)
        except FileNotFoundError:
            # Neither file exists yet: nothing reached the proxy.
            return Capture(
                directory=self.out_dir, records=(), events=(), session_ends=(), sessions={}
            )

    @property
    def expect(self) -> Expect:
        """Assertions on the capture as it is now (``modeltap.expect.tool_called("x")``):
        each returns a verdict, ``passed``, ``failed`` or ``unavailable`` (what the
        proxy saw cannot tell); ``assert`` it."""
        return self.capture().expect

    def end_session(self, session_id: str) -> SessionStatus:
        """End a session the way ``modeltap session end`` does (the control API).

        Its ``sessions.jsonl`` line is written and later requests in it are
        refused (``session_ended``). Ending it again returns the same status
        and writes nothing. A session no request carried (the agent bypassed
        the proxy) is ended too: its line says "No outbound model requests
        captured; audit unsupported" (``status.message``), and the capture
        fails it by name.

        Args:
            session_id: the ``x-modeltap-session`` the agent sent (or the
                ``session`` option of the proxy).

        Returns:
            The session's status, as its ``sessions.jsonl`` line says.

        Raises:
            modeltap.app.control.ControlError: the proxy could not be reached.
        """
        from modeltap.app import control

        (ended,) = control.end_session(self.out_dir, session_id)
        return ended.status

    def report(self) -> Report:
        """The report of :meth:`capture`: typed (``report.sessions[0].turns``),
        ``str(report)`` is what ``modeltap report`` prints, and
        ``report["sessions"]`` what ``modeltap report --json`` prints."""
        from modeltap.report.types import Report

        return Report.of(self.capture())


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--modeltap-upstream URL`` and the ``modeltap_upstream`` ini option."""
    help_text = (
        "Upstream URL mounted at / for the modeltap fixture (like `modeltap run --upstream`); "
        "markers and the modeltap_config fixture can override it."
    )
    parser.getgroup("modeltap").addoption(
        "--modeltap-upstream", dest=INI_UPSTREAM, metavar="URL", default=None, help=help_text
    )
    parser.addini(INI_UPSTREAM, help_text)


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``modeltap`` marker."""
    config.stash[_UNAVAILABLE] = []
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**options): options of the modeltap fixture's proxy, named like the "
        "fields of modeltap.app.proxy.ProxyConfig (upstream=..., routes=[...], strict=True, ...)",
    )


@pytest.fixture
def modeltap_config() -> dict[str, Any]:
    """Proxy options for the ``modeltap`` fixture; override it to compute them from fixtures.

    Returns:
        ``ProxyConfig`` field values; empty by default.
    """
    return {}


def _options(request: pytest.FixtureRequest, configured: dict[str, Any]) -> dict[str, Any]:
    """Merge ini, command line, ``modeltap_config`` and markers (later wins)."""
    options: dict[str, Any] = {}
    upstream = request.config.getoption(INI_UPSTREAM) or request.config.getini(INI_UPSTREAM)
    if upstream:
        options["upstream"] = upstream
    options.update(configured)
    # iter_markers yields the closest first; apply the farthest first so the closest wins.
    for marker in reversed(list(request.node.iter_markers(MARKER))):
        if marker.args:
            pytest.fail(f"@pytest.mark.{MARKER} takes keyword arguments only", pytrace=False)
        options.update(marker.kwargs)
    return options


@pytest.fixture
def modeltap(
    request: pytest.FixtureRequest, tmp_path: Path, modeltap_config: dict[str, Any]
) -> Iterator[ModelTapFixture]:
    """Run modeltap on a free port for this test; yield its URLs and captured evidence.

    See the module documentation for the configuration. The proxy is stopped
    (and its files closed) when the test ends, pass or fail.
    """
    from modeltap.app.proxy import Proxy, ProxyConfig
    from modeltap.rules.errors import StartupError

    options: dict[str, Any] = {"listen_port": 0, "out": tmp_path / "modeltap", "quiet": True}
    options.update(_options(request, modeltap_config))
    try:
        config = ProxyConfig.from_options(options)
    except ValueError as e:
        pytest.fail(f"modeltap: {e}", pytrace=False)
    config.out = str(config.out)
    try:
        proxy = Proxy(config).start()
    except StartupError as exc:
        # One line naming what failed (an option, the out dir, an address and the
        # OS's reason); mitmproxy's traceback would be noise.
        raise pytest.fail.Exception(f"modeltap did not start: {exc}", pytrace=False) from None
    try:
        yield ModelTapFixture(
            url=proxy.url,
            out_dir=Path(config.out),
            exports=_exports(proxy),
            record_dir=Path(config.record) if config.record else None,
        )
    finally:
        proxy.stop()


def _exports(proxy: Proxy) -> tuple[ExportLine, ...]:
    """The ``export`` lines ``modeltap run`` would print for the proxy's routes."""
    from modeltap.app.client_env import export_lines, exported_routes
    from modeltap.rules.routing import RouteTable, parse_route_spec

    config = proxy.config
    routes = RouteTable.build(list(config.routes), config.upstream).routes
    named = {parse_route_spec(spec).name for spec in config.routes}
    return tuple(export_lines(exported_routes(routes, named), proxy.url))


# --------------------------------------------------------------------------
# Verdicts: shown when a test fails, and every unavailable one in the summary


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Watch the verdicts the test makes (an optional copy replaces its original)."""
    from modeltap.evidence.verdicts import watch_verdicts

    with watch_verdicts() as made:
        try:
            return (yield)
        finally:
            latest: dict[int, Verdict] = {}
            for verdict in made:
                latest[verdict.key] = verdict
            item.stash[_MADE] = list(latest.values())
            unavailable = item.config.stash.get(_UNAVAILABLE, [])
            unavailable.extend((item.nodeid, v) for v in latest.values() if v.unavailable)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report gets the full text of each verdict that did not pass."""
    report = yield
    if call.when == "call" and report.failed:
        from modeltap.report.terminal import printable

        # Tool names and session ids come from the wire: no escape reaches the terminal.
        shown = [printable(str(v)) for v in item.stash.get(_MADE, []) if not v.passed]
        if shown:
            report.sections.append(("modeltap verdicts", "\n\n".join(shown)))
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """List every unavailable verdict of the run, optional ones too."""
    unavailable = config.stash.get(_UNAVAILABLE, [])
    if not unavailable:
        return
    from modeltap.report.terminal import printable

    terminalreporter.section("modeltap: unavailable verdicts", sep="=", yellow=True)
    for nodeid, verdict in unavailable:
        terminalreporter.write_line(f"{nodeid}: {printable(str(verdict))}")
    optional = sum(1 for _, v in unavailable if v.is_optional)
    terminalreporter.write_line(
        f"{len(unavailable)} unavailable verdict{'s' if len(unavailable) != 1 else ''} "
        f"({optional} optional): the evidence could not tell; each line says what would."
    )
