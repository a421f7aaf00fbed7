"""Run mitmproxy with the modeltap addons: in the foreground (``modeltap run``)
or in a background thread (the pytest fixture, tests, benchmarks); live, or
replaying a recording (:func:`replay_proxy`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from modeltap.addons import Control, Deadlines, ModelTap, Spans, default_addons
from modeltap.addons.patches import ctx_per_proxy
from modeltap.addons.replayer import Replayer
from modeltap.app import options
from modeltap.app.options import parse_address
from modeltap.core.run import Run
from modeltap.evidence import cost, redaction
from modeltap.replay.matching import Player
from modeltap.replay.recording import Recording
from modeltap.replay.upstream import ReplayServer
from modeltap.rules.errors import StartupError
from modeltap.rules.failures import Timeouts, parse_seconds, parse_upstream_timeout
from modeltap.rules.listening import listen_failure

with warnings.catch_warnings():
    # mitmproxy's proxyauth imports ldap3, which warns about its own use of
    # pyasn1 on import: noise in the pytest runs of every project using the
    # plugin, about code that is not theirs. Only those two warnings.
    warnings.filterwarnings("ignore", r"(tagMap|typeMap) is deprecated", DeprecationWarning)
    from mitmproxy import exceptions
    from mitmproxy import options as mitm_options
    from mitmproxy.addons import (
        block,
        core,
        disable_h2c,
        errorcheck,
        next_layer,
        proxyauth,
        proxyserver,
        tlsconfig,
        update_alt_svc,
    )
    from mitmproxy.master import Master

#: The options that decide whether the proxy is open to anyone (set first).
_LISTENING = ("mode", "listen_host", "listen_port", "proxyauth", "modeltap_allow_open_proxy")

#: Reverse mode needs *a* target; every request is re-pointed at its route's
#: upstream before it leaves, and connections are opened lazily, so this
#: placeholder is never connected to.
_PLACEHOLDER = "reverse:http://127.0.0.1:9"


_LISTEN = parse_address(options.default("listen"))


@dataclass
class ProxyConfig:
    """Everything ``modeltap run`` takes.

    The fields are the rows of :data:`modeltap.app.options.OPTIONS`, named and
    defaulted there (``listen`` is split into ``listen_host`` and
    ``listen_port``); :meth:`from_options` also takes the command line's
    spellings. ``extra`` holds further mitmproxy options, set last.
    """

    listen_host: str = _LISTEN[0]
    listen_port: int = _LISTEN[1]
    out: str = options.default("out")
    #: ``reverse`` or ``regular``; unset is ``reverse``.
    mode: str | None = options.default("mode")
    routes: list[str] = field(default_factory=lambda: options.default("routes"))
    upstream: str | None = options.default("upstream")
    mcp: list[str] = field(default_factory=lambda: options.default("mcp"))
    mcp_hosts: list[str] = field(default_factory=lambda: options.default("mcp_hosts"))
    upstream_ca: str | None = options.default("upstream_ca")
    upstream_insecure: bool = options.default("upstream_insecure")
    strict: bool = options.default("strict")
    fail_closed: bool = options.default("fail_closed")
    image_detail: str | None = options.default("image_detail")
    max_body: str = options.default("max_body")
    session: str | None = options.default("session")
    continuation: str = options.default("continuation")
    ws_allow: list[str] = field(default_factory=lambda: options.default("ws_allow"))
    max_tool_calls: int | None = options.default("max_tool_calls")
    otlp: str | None = options.default("otlp")
    otlp_logs: bool = options.default("otlp_logs")
    capture_content: bool = options.default("capture_content")
    record: str | None = options.default("record")
    proxyauth: str | None = options.default("proxyauth")
    control: str = options.default("control")
    allow_open_proxy: bool = options.default("allow_open_proxy")
    upstream_timeout: str = options.default("upstream_timeout")
    client_timeout: str = options.default("client_timeout")
    quiet: bool = options.default("quiet")
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> ProxyConfig:
        """A config from option values named as the table or the command line names them.

        Raises:
            ValueError: an unknown name, or a bad ``listen`` value.
        """
        return cls(**options.config_values(values))

    def mitm_options(self) -> dict[str, Any]:
        """The mitmproxy option values (core options and the addons' own)."""
        opts: dict[str, Any] = {
            "mode": ["regular" if self.mode == "regular" else _PLACEHOLDER],
            "listen_host": self.listen_host,
            "listen_port": self.listen_port,
            "connection_strategy": "lazy",
            "tcp_timeout": self._watchdog(),
        }
        for opt in options.OPTIONS:
            name = opt.mitm_name
            value: Any = getattr(self, opt.name, None)
            if name is None or (name in options.MITMPROXY_OWN and value is None):
                continue  # not a mitmproxy option, or mitmproxy's own default stays
            opts[name] = list(value) if opt.repeated else value
        # Said outright: unset, the addon would follow mitmproxy's mode, and take the
        # placeholder target above for an upstream.
        opts["modeltap_mode"] = "regular" if self.mode == "regular" else "reverse"
        opts.update(self.extra)
        return opts

    def _watchdog(self) -> int:
        """mitmproxy's inactivity ``tcp_timeout``, above every modeltap limit so that
        modeltap, not the watchdog, ends a stalled exchange (and names it)."""
        try:
            timeouts = parse_upstream_timeout(self.upstream_timeout)
            timeouts = replace(timeouts, request=parse_seconds(self.client_timeout, "client"))
        except ValueError:
            timeouts = Timeouts()  # the addon refuses the bad value with its own message
        return timeouts.watchdog


class _StartupCheck(errorcheck.ErrorCheck):
    """mitmproxy's start-up check, saying what failed in one line.

    mitmproxy's own prints ``Error logged during startup, exiting...`` and
    calls ``sys.exit(1)``: the pytest fixture then said ``modeltap did not
    start: 1``. This one raises :class:`StartupError` naming the address and
    the OS's reason when a listener failed, else the first error logged.
    """

    #: The name mitmproxy's master looks it up by.
    name = "errorcheck"

    def __init__(self, master: Master) -> None:
        super().__init__()
        self._master = master
        # Only errors logged in this proxy's own thread stop its start: an OTLP
        # exporter's worker thread (this proxy's, finding no collector, or
        # another proxy's in the same process) logs its failures at ERROR,
        # and a dead collector must never stop a proxy from starting.
        thread = threading.get_ident()
        self.logger.addFilter(lambda record: record.thread == thread)

    async def shutdown_if_errored(self) -> None:
        await asyncio.sleep(0)  # as mitmproxy's: let pending log records arrive
        if self.logger.has_errored:
            self.finish()
            raise StartupError(self._describe(self.logger.has_errored))

    def _describe(self, logged: list[logging.LogRecord]) -> str:
        master = self._master
        servers = master.addons.get("proxyserver")
        for instance in servers.servers if servers is not None else ():
            error = instance.last_exception
            if isinstance(error, OSError):
                # mitmproxy wraps the bind's own error in a message of its own
                # (with a hint in its command line's terms); the cause is the OS's.
                cause = error.__cause__ if isinstance(error.__cause__, OSError) else error
                host = instance.mode.listen_host(master.options.listen_host)
                port = instance.mode.listen_port(master.options.listen_port)
                return listen_failure("the proxy", host, port, cause)
        lines = logged[0].getMessage().strip().splitlines()
        return lines[0] if lines else "an error was logged during start-up"


def _proxy_addons(check: errorcheck.ErrorCheck) -> list[Any]:
    """The mitmproxy addons modeltap needs, not DumpMaster's thirty-odd.

    mitmproxy calls every loaded addon for every hook of every flow (about ten
    per HTTP exchange); with the full default set that dispatch was a third of
    the proxy's CPU per request (see bench/README.md). modeltap uses none of the
    interactive or rewriting addons (map_local, modify_body, save, cut, ...).
    ``mitmdump -s addons/modeltap.py`` still loads the full set.
    """
    return [
        core.Core(),
        block.Block(),
        disable_h2c.DisableH2C(),
        proxyauth.ProxyAuth(),
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        update_alt_svc.UpdateAltSvc(),
        check,
    ]


def _warm_up(own_process: bool) -> None:
    """Load the price table and compile the path-redaction patterns (a quarter
    of a second and tens of milliseconds) once the proxy listens.

    In a process of its own (``modeltap run``), everything loaded so far then
    leaves the garbage collector's sight (``gc.freeze``): the modules, the
    price table and the patterns live as long as the process, and every full
    collection walked them all again. Not in a process that embeds the proxy
    (the pytest fixture): its objects are not ours to freeze.
    """
    redaction.compile_patterns()
    cost.load_table()
    if own_process:
        gc.freeze()


def _quiet_cancelled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


class Proxy:
    """One mitmproxy master with the modeltap addons, sharing one :class:`Run`."""

    def __init__(self, config: ProxyConfig, addons: Sequence[object] = ()) -> None:
        self.config = config
        #: The run every addon shares: its id, counts, sessions and files.
        self.core = Run()
        self.addons = [*default_addons(self.core), *addons]
        self.master: Master | None = None
        self.addresses: list[tuple[str, int]] = []
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        #: Running in a process of its own (run_foreground), not embedded.
        self._own_process = False

    def addon[T](self, kind: type[T]) -> T:
        """The addon of class ``kind``.

        Raises:
            StopIteration: there is none.
        """
        return next(a for a in self.addons if isinstance(a, kind))

    @property
    def run_id(self) -> str:
        """The run's id (the default session, and part of every line)."""
        return self.core.run_id

    @property
    def counts(self) -> dict[str, int]:
        """Exchanges audited, refused, passed through unaudited, and errors so far."""
        return self.core.counts

    @property
    def timeouts(self) -> Timeouts:
        """The limits in force (``--upstream-timeout``, ``--client-timeout``)."""
        return self.addon(Deadlines).timeouts

    @property
    def spans(self) -> Spans:
        """The spans addon: where spans go, and the line it printed at exit."""
        return self.addon(Spans)

    async def run(self, on_ready: Callable[[Proxy], None] | None = None) -> None:
        """Run until :meth:`stop` (or Ctrl-C in the CLI).

        Raises:
            StartupError: a bad option value, an out dir that cannot be
                written, a listener that cannot start: one line naming it.
        """
        opts = mitm_options.Options()
        master = Master(opts, with_termlog=False)
        master.addons.add(*_proxy_addons(_StartupCheck(master)))
        config = self.config.mitm_options()
        # The addon refuses to start an open proxy, and must judge the real
        # listening set-up, never mitmproxy's defaults (regular mode on every
        # interface) that a failed update would roll back to. So the set-up is
        # in place before the addon is added, then applied again for its check.
        listening = {k: config.pop(k) for k in _LISTENING if k in config}
        try:
            opts.update_defer(**listening)
            master.addons.add(ModelTap(self.addons))
            opts.update(**listening)
            opts.update(**config)
        except exceptions.OptionsError as e:
            raise StartupError(str(e)) from None
        self.master = master

        async def announce() -> None:
            # Wait until the listening sockets exist and the control API is served
            # (its file written), then report the addresses.
            ps = master.addons.get("proxyserver")
            while not master.should_exit.is_set():
                addrs = ps.listen_addrs() if ps else []
                if addrs and self.addon(Control).server is not None:
                    self.addresses = [(a[0], a[1]) for a in addrs]
                    self._ready.set()
                    # What start-up need not wait for loads beside the traffic
                    # (bench/README.md, start-up).
                    threading.Thread(
                        target=_warm_up,
                        args=(self._own_process,),
                        name="modeltap-warm-up",
                        daemon=True,
                    ).start()
                    if on_ready is not None:
                        on_ready(self)
                    return
                await asyncio.sleep(0.005)

        task = asyncio.create_task(announce())
        try:
            await master.run()
            # mitmproxy leaves its listening sockets open after shutdown; close them so
            # a client of a stopped proxy is refused instead of left waiting.
            proxyserver = master.addons.get("proxyserver")
            if proxyserver is not None:
                await proxyserver.servers.update([])
        finally:
            task.cancel()
            self._ready.set()
            # Connections still open at shutdown (SDK keep-alives) are cancelled by
            # asyncio.run's cleanup; that is expected and not worth a traceback.
            asyncio.get_running_loop().set_exception_handler(_quiet_cancelled)

    def run_foreground(self, on_ready: Callable[[Proxy], None] | None = None) -> None:
        """Run in this thread until Ctrl-C or SIGTERM; files and spans are flushed on the way out.

        Raises:
            StartupError: it could not start (the message says what and why).
        """
        self._own_process = True

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._shutdown)
            await self.run(on_ready=on_ready)

        asyncio.run(main())

    def _shutdown(self) -> None:
        if self.master is not None:
            self.master.shutdown()

    @property
    def port(self) -> int:
        """The port actually listened on (useful with ``listen_port=0``)."""
        return self.addresses[0][1]

    @property
    def url(self) -> str:
        """``http://host:port`` of the proxy."""
        host = self.config.listen_host
        return f"http://{host}:{self.port}"

    @property
    def control_url(self) -> str | None:
        """``http://host:port`` of the control API (its own listener, token required)."""
        return self.addon(Control).url

    # -------------------------------------------------------------- threads

    def start(self, timeout: float = 15.0) -> Proxy:
        """Start in a background thread and wait until it listens.

        Raises:
            StartupError: if it did not start; one line saying what failed
                (the address and the OS's reason, the path, the option).
        """

        # Only here, where several proxies may share a process (fixtures, a
        # harness): ``modeltap run`` runs one, and keeps mitmproxy's plain
        # module globals, read on every connection, at their usual cost.
        ctx_per_proxy.install()

        def target() -> None:
            try:
                asyncio.run(self.run())
            except BaseException as e:  # reported to the starting thread
                self._error = e
                self._ready.set()

        self._thread = threading.Thread(target=target, name="modeltap-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or not self.addresses:
            self.stop()
            error = self._error
            if isinstance(error, StartupError):
                # Chained as before (callers read __cause__): the same one line.
                raise StartupError(str(error)) from error
            if error is None:
                raise StartupError(f"it did not listen within {timeout:g} s")
            raise StartupError(f"{type(error).__name__}: {error}") from error
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Shut down and wait for the thread; files are flushed by the addons' ``done``."""
        master, self.master = self.master, None
        if master is not None and not master.event_loop.is_closed():
            master.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def replay_proxy(
    recording: Recording | str | Path,
    config: ProxyConfig,
    *,
    fast: bool = False,
    show_content: bool = False,
) -> tuple[Proxy, Replayer]:
    """A :class:`Proxy` that replays ``recording`` (not started).

    Every route points at a replay upstream (:mod:`modeltap.replay.upstream`)
    serving the recording; the normal addons audit the replayed run like a
    live one, and a :class:`~modeltap.addons.replayer.Replayer` matches it.

    Args:
        recording: a loaded recording or its directory.
        config: the proxy's config; its routes and upstream are replaced by
            routes to the replay upstream, and it runs in reverse mode
            without recording.
        fast: replay without the recorded delays.
        show_content: mismatch lines (stderr, ``replay-diff.jsonl``) also
            give the changed values; never the error the agent gets.

    Returns:
        ``(proxy, replayer)``: start the proxy; read ``replayer.problems`` after it stopped.

    Raises:
        RecordingError: if the recording cannot be read.
    """
    if not isinstance(recording, Recording):
        recording = Recording.load(recording)
    server = ReplayServer(recording, fast=fast)
    routes, upstream = recording.routes_to(server.url)
    mcp = recording.mcp_routes_to(server.url)
    config = replace(
        config,
        mode="reverse",
        routes=routes,
        upstream=upstream,
        mcp=mcp,
        mcp_hosts=[],
        record=None,
    )
    proxy = Proxy(config)
    player = Player(recording, show_content=show_content)
    replayer = Replayer(proxy.core, player, server, Path(config.out), quiet=config.quiet)
    proxy.addons.append(replayer)
    return proxy, replayer
