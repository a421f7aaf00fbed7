"""``modeltap run | session | report | check | view | replay | demo``: the command line."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from modeltap import __version__
from modeltap.addons import Control
from modeltap.app import options
from modeltap.app.client_env import export_lines, exported_routes, mcp_snippets, mcp_url
from modeltap.app.proxy import Proxy, ProxyConfig, replay_proxy
from modeltap.evidence.records import DEFAULT_OUT
from modeltap.replay.matching import plural
from modeltap.replay.recording import DIFF_FILE, Recording, RecordingError
from modeltap.report.terminal import (
    TerminalLogHandler,
    print_document,
    print_lines,
    printable,
)
from modeltap.rules.errors import StartupError
from modeltap.rules.listening import is_loopback, open_proxy_listeners, open_proxy_message
from modeltap.rules.routing import PROVIDER_HOSTS, RouteError, RouteTable, parse_route_spec


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modeltap",
        description="A capture proxy beside an AI agent: audit every model request before "
        "it is forwarded, observe what comes back, export OpenTelemetry spans.",
    )
    parser.add_argument("--version", action="version", version=f"modeltap {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the proxy", description="Start the capture proxy.")
    options.add_arguments(run, options.RUN)

    session = sub.add_parser(
        "session",
        help="end a session on a running proxy (writes its sessions.jsonl line)",
        description="End a session for good: its sessions.jsonl line is written, and later "
        "requests in it are refused (session_ended). A second end prints the first status and "
        "writes nothing; an unknown session is an error. Talks to the proxy's control "
        "listener, found with its token in the out dir.",
    )
    session.add_argument("action", choices=("end",))
    session.add_argument("session_id", metavar="ID")
    session.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"the running proxy's --out (default {DEFAULT_OUT})",
    )
    sub.add_parser(
        "check",
        help="exit 0 only if every session completed with complete evidence",
        add_help=False,
    )
    report = sub.add_parser(
        "report", help="per-session, per-turn report of an out dir", add_help=False
    )
    report.add_argument("args", nargs=argparse.REMAINDER)
    # Listed for --help; main() hands their arguments to replay_main and demo_main.
    sub.add_parser("replay", help="answer an agent from a --record directory", add_help=False)
    sub.add_parser("demo", help="a scripted agent replayed through modeltap", add_help=False)
    sub.add_parser("view", help="write a capture as one self-contained HTML page", add_help=False)
    return parser


def misspelt_option_hint(extra: Sequence[str]) -> str | None:
    """The fix for an option modeltap does not have but is often guessed
    (``--port 9000``, ``--host 0.0.0.0``), in one line; ``None`` for others.

    Args:
        extra: the arguments argparse did not recognise, as given.
    """
    for i, arg in enumerate(extra):
        name, sep, value = arg.partition("=")
        if name not in ("--port", "-p", "--host", "--bind"):
            continue
        if not sep:
            value = extra[i + 1] if i + 1 < len(extra) else ""
        is_port = name in ("--port", "-p")
        port = value if is_port and value.isdigit() and value.isascii() else "PORT"
        host = "HOST" if is_port or not value or value.startswith("-") else value
        listen = f"127.0.0.1:{port}" if is_port else f"{host}:8787"
        return f"there is no {name} option; use --listen {listen} (--listen HOST:PORT, or PORT)"
    return None


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """Turn parsed ``run`` (or ``replay``) arguments into a :class:`ProxyConfig`."""
    names = {o.cli_name for o in options.OPTIONS if not o.cli_only}
    return ProxyConfig.from_options({k: v for k, v in vars(args).items() if k in names})


def startup_screen(
    proxy: Proxy, ui_link: str | None = None, *, recording: Recording | None = None
) -> str:
    """The one-screen summary printed at start (SPEC section 1).

    With ``recording`` (``modeltap replay``), the routes are the recorded
    ones, each answered from the recording: what the agent talks to, never the
    replay's internal upstream.
    """
    cfg = proxy.config
    recorded_turns: dict[str, int] = {}
    specs = list(cfg.routes)
    recorded_mcp: dict[str, int] = {}
    if recording is not None:
        specs, upstream, recorded_turns = recording.recorded_routes()
        mcp_specs, recorded_mcp = recording.recorded_mcp()
        routes = RouteTable.build(specs, upstream, mcp_specs)
    else:
        routes = RouteTable.build(cfg.routes, cfg.upstream, cfg.mcp, cfg.mcp_hosts)
    url = proxy.url
    out = Path(cfg.out)
    lines = [f"modeltap {__version__}  run {proxy.run_id}"]
    confdir = proxy.master.options.confdir if proxy.master else "~/.mitmproxy"
    ca = Path(confdir).expanduser() / "mitmproxy-ca-cert.pem"
    if cfg.mode == "regular":
        lines.append(f"  listening  {url}  (forward proxy)")
        lines.append("  audited    " + ", ".join(f"{r.host}:{r.port}" for r in routes.routes))
        lines.append(
            "             and every provider host: "
            + ", ".join(dict.fromkeys(pattern for pattern, _ in PROVIDER_HOSTS))
        )
        lines.append("  export     HTTPS_PROXY=" + url + "  HTTP_PROXY=" + url)
        if cfg.mcp_hosts:
            lines.append("  mcp hosts  " + ", ".join(cfg.mcp_hosts) + "  (audited as MCP)")
        lines.append(
            f"  CA cert    {ca}  (trust it, e.g. SSL_CERT_FILE / NODE_EXTRA_CA_CERTS / "
            "AWS_CA_BUNDLE)"
        )
    else:
        lines.append(f"  listening  {url}  (reverse proxy)")
        width = max(len(r.prefix) for r in routes.routes)
        for i, r in enumerate(routes.routes):
            head = "  routes     " if i == 0 else "             "
            target = r.url
            if recording is not None:
                n = (recorded_mcp if r.mcp else recorded_turns).get(r.name, 0)
                noun = "MCP request" if r.mcp else "turn"
                recorded = (
                    f"{plural(n, noun)} recorded from {r.url}" if n else f"no {noun} recorded"
                )
                target = f"the recording ({recorded})"
            lines.append(f"{head}{r.prefix.ljust(width)}  -> {target}")
        named = {parse_route_spec(spec).name for spec in specs}
        shown = [r for r in exported_routes(routes.routes, named) if not r.mcp]
        found = export_lines(shown, url)
        # Replay has no --upstream: a recorded one is the route at /.
        exports = [e.shown("route /" if recording is not None else "--upstream") for e in found]
        for r in shown:
            if all(e.route != r.name for e in found):
                exports.append(f"{r.name}: {url}{'' if r.prefix == '/' else r.prefix}")
        for i, e in enumerate(exports):
            lines.append(("  export     " if i == 0 else "             ") + e)
        if any(e.value.startswith("https://") for e in found):
            # This port answers TLS too, with certificates from mitmproxy's CA.
            lines.append(f"  CA cert    {ca}  (for https:// to this port)")
        lines.extend(_mcp_lines(routes, url))
    lines.append(
        f"  files      {out / 'audit.jsonl'}  {out / 'events.jsonl'}  {out / 'sessions.jsonl'}"
    )
    if cfg.record:
        lines.append(f"  record     {cfg.record}  (full request and response bodies, for replay)")
    lines.append(
        f"  control    {proxy.control_url}  (modeltap session end ID --out {out}; "
        "token in the out dir)"
    )
    if ui_link is not None:
        lines.append(f"  ui         {ui_link}  (one-time link to the live page)")
    for described in (proxy.spans.telemetry.describe(), proxy.spans.telemetry.describe_logs()):
        label, _, said = described.partition(": ")  # "spans: ..." in the screen's columns
        lines.append(f"  {label:<11}{said}")
    timeouts = proxy.timeouts
    lines.append(
        f"  timeouts   upstream {timeouts.describe_upstream()}; client body idle "
        f"{timeouts.request:g} s"
    )
    if cfg.upstream_ca:
        lines.append(f"  upstream   TLS verified against the public roots and {cfg.upstream_ca}")
    if cfg.upstream_insecure:
        lines.append(
            "  WARNING    upstream TLS NOT VERIFIED (--upstream-insecure): anyone on the path "
            "can answer as the upstream; sessions.jsonl says upstream_insecure: true"
        )
    if cfg.mode == "regular" and open_proxy_listeners(
        [("regular", cfg.listen_host, proxy.port)], cfg.proxyauth
    ):
        lines.append(
            f"  WARNING    OPEN PROXY on {cfg.listen_host}:{proxy.port} (--allow-open-proxy): "
            "anyone who can reach it can relay traffic to any host"
        )
    elif not is_loopback(cfg.listen_host):
        lines.append(
            f"  WARNING    listening on {cfg.listen_host}: anyone who can reach it can use it"
            + (" (see --proxyauth)" if cfg.mode == "regular" else "")
        )
    control_host = cfg.control.rpartition(":")[0].strip("[]")
    if control_host not in ("127.0.0.1", "localhost", "::1"):
        lines.append(
            f"  WARNING    control API on {control_host}: reachable beyond this machine "
            "(it still needs the run's token)"
        )
    lines.append("  Ctrl-C stops and flushes.")
    # A recording's routes and sessions are wire text: each line escaped on its own.
    return "\n".join(printable(line) for line in lines)


def _mcp_lines(routes: RouteTable, url: str) -> list[str]:
    """Per MCP server: its URL through the proxy and each agent's configuration."""
    lines = []
    for i, route in enumerate(routes.mcp):
        reached = mcp_url(route, url)
        lines.append(("  mcp        " if i == 0 else "             ") + f"{route.name}: {reached}")
        for snippet in mcp_snippets(route.name, reached):
            where = f"  ({snippet.where})" if snippet.where else ""
            lines.append(f"               {snippet.agent:<13}{snippet.text}{where}")
    if lines:
        lines.append(
            "             (MCP traffic joins x-modeltap-session or --session; else one session "
            "per Mcp-Session-Id)"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    """Run the proxy in the foreground until Ctrl-C or SIGTERM; exit 0 after flushing."""
    try:
        RouteTable.build(list(args.route), args.upstream, list(args.mcp), list(args.mcp_host))
    except RouteError as e:
        print_lines(f"modeltap: {e}", stderr=True)
        return 2
    host, port = args.listen
    open_ones = open_proxy_listeners([(args.mode, host, port)], args.proxyauth)
    if open_ones and not args.allow_open_proxy:
        fix = "listen on 127.0.0.1, add --proxyauth USER:PASS, or pass --allow-open-proxy"
        print_lines(f"modeltap: {open_proxy_message(open_ones, fix)}", stderr=True)
        return 2
    proxy = Proxy(config_from_args(args))

    def ready(p: Proxy) -> None:
        screen = startup_screen(p, serve_ui(p) if args.ui else None)
        print_lines(*screen.split("\n"), stderr=True, flush=True)

    try:
        proxy.run_foreground(on_ready=ready)
    except Exception as e:  # bad options or a port in use: say it plainly
        print_lines(f"modeltap: {e}", stderr=True)
        return 1
    counts = proxy.counts
    print_lines(
        f"modeltap: stopped. audited {counts['audited']}, refused {counts['refused']}, "
        f"unaudited {counts['unaudited']}, errors {counts['errors']}.",
        *(f"modeltap: {line}" for line in (proxy.spans.summary or "").splitlines()),
        stderr=True,
    )
    return 0


def serve_ui(proxy: Proxy) -> str | None:
    """Add the live page to the running control listener; its one-time link."""
    from modeltap.report.view.live import LivePage

    server = proxy.addon(Control).server
    if server is None:
        return None
    page = LivePage(Path(proxy.config.out), server.token, server.url)
    server.routes.append(page)
    return page.new_link()


# --------------------------------------------------------------------------
# modeltap replay and modeltap demo


def build_replay_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modeltap replay",
        description="Answer an agent from a recording made with `modeltap run --record DIR`: "
        "no upstream, no network. Requests are matched in order within each session on "
        "their audit record (model, tools, instructions hash, image count, input hash); a "
        "changed request gets a provider-shaped error and one line in OUT/replay-diff.jsonl "
        "saying where it changed (JSON paths with sizes), and later turns still line up "
        "(an inserted, deleted or changed turn is one line). The replayed run is audited "
        "into its own --out (default ./modeltap-replay). Runs until Ctrl-C.",
    )
    parser.add_argument("recording", metavar="DIR", help="the --record directory")
    parser.add_argument(
        "--fast",
        action="store_true",
        help="send SSE chunks and WebSocket messages without the recorded delays",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if any request differed from the recording or a recorded turn was not "
        "replayed (the diff is printed at exit)",
    )
    parser.add_argument(
        "--show-content",
        action="store_true",
        help="diff lines (stderr, replay-diff.jsonl) also show the changed values, cut at 200 "
        "characters; off by default: only paths and sizes. Never headers, never values of "
        "keys named like credentials, never in the error the agent gets",
    )
    options.add_arguments(parser, options.REPLAY)
    return parser


def replay_main(argv: Sequence[str]) -> int:
    """``modeltap replay DIR [--fast] [--check] [--listen HOST:PORT] [--out DIR]``.

    Returns:
        0; 1 with ``--check`` when anything differed or was not replayed; 2
        when the recording cannot be read or the proxy cannot start.
    """
    parser = build_replay_parser()
    args, extra = parser.parse_known_args(list(argv))
    if extra:
        hint = misspelt_option_hint(extra)
        if hint is None:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        print_lines(f"modeltap replay: {hint}", stderr=True)
        return 2
    try:
        recording = Recording.load(args.recording)
    except RecordingError as e:
        print_lines(f"modeltap replay: {e}", stderr=True)
        return 2
    config = ProxyConfig.from_options(
        {o.name: getattr(args, o.cli_name) for o in options.OPTIONS if options.REPLAY in o.commands}
    )
    proxy, replay = replay_proxy(recording, config, fast=args.fast, show_content=args.show_content)

    def ready(p: Proxy) -> None:
        pace = "without delays (--fast)" if args.fast else "at the recorded pace"
        turns = plural(replay.player.turns_recorded, "turn")
        sessions = plural(len(recording.sessions), "session")
        mcp = sum(player.turns_recorded for player in replay.mcp_players.values())
        if mcp:
            turns += f" and {plural(mcp, 'MCP request')}"
        print_lines(
            *startup_screen(p, recording=recording).split("\n"),
            f"  replaying  {recording.root}  ({turns} in {sessions}) {pace}; diff -> "
            f"{Path(config.out) / DIFF_FILE}",
            stderr=True,
            flush=True,
        )

    try:
        proxy.run_foreground(on_ready=ready)
    except Exception as e:  # bad options or a port in use: say it plainly
        print_lines(f"modeltap replay: {e}", stderr=True)
        return 2
    # A problem's message quotes the recorded session: escaped, like every line.
    print_lines(*(problem.message for problem in replay.problems))
    print_lines(f"modeltap replay: {replay.summary()}", stderr=True)
    return 1 if args.check and replay.problems else 0


def demo_main(argv: Sequence[str]) -> int:
    """``modeltap demo``: a scripted agent through modeltap, answered by the
    recording shipped in the package; prints the audit records and the report.

    Returns:
        0; 1 if the replay differed; 2 if the openai package is missing.
    """
    parser = argparse.ArgumentParser(
        prog="modeltap demo",
        description="Run a small openai-SDK tool loop through modeltap, answered by a "
        "recording shipped with modeltap (no API key, no network), then print the audit "
        "records, `modeltap report`, and the `modeltap view` command for its page.",
    )
    parser.add_argument("--fast", action="store_true", help="replay without recorded delays")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where the run's files go (default: a new temp dir, kept until the next demo "
        "without --out, which removes it)",
    )
    args = parser.parse_args(list(argv))
    try:
        import openai

        from modeltap.app.demo import agent
    except ImportError:
        print_lines("modeltap demo needs the openai package: pip install openai", stderr=True)
        return 2
    from modeltap.app.demo import record_lines, remove_scratch, scratch_out
    from modeltap.evidence.capture import Capture
    from modeltap.report.report import build_report, render_text

    out = Path(args.out) if args.out else scratch_out()
    config = ProxyConfig(listen_port=0, out=str(out), session=agent.SESSION, quiet=True)
    with resources.as_file(resources.files("modeltap.app.demo") / "recording") as directory:
        proxy, replay = replay_proxy(Recording.load(directory), config, fast=args.fast)
        started = time.monotonic()
        try:
            proxy.start()
        except StartupError as e:  # an --out that cannot be written: one line, as run says it
            print_lines(f"modeltap demo: {e}", stderr=True)
            if not args.out:
                remove_scratch(out)  # nothing in it to look at
            return 1
        try:
            client = openai.OpenAI(
                base_url=f"{proxy.url}/openai/v1",
                api_key="no-key-needed-for-a-replay",
                max_retries=0,
                # The agent talks to modeltap on loopback; never via an HTTP(S)_PROXY.
                http_client=openai.DefaultHttpxClient(trust_env=False),
            )
            answer = agent.run_agent(client)
        finally:
            proxy.stop()
        elapsed = time.monotonic() - started
    capture = Capture.load(out)
    print_lines(
        f"== the agent (openai SDK tool loop, {elapsed:.2f}s) answered:",
        *answer.split("\n"),  # the model's text: each of its lines escaped
        "",
        f"== {out / 'audit.jsonl'}: one record per model request, written before forwarding",
        *record_lines(capture.records),
        f"   (names, counts, hashes and sizes only; every field: jq . {out / 'audit.jsonl'})",
        "",
        f"== modeltap report {out}",
        *render_text(build_report(capture)).split("\n"),
        f"== replay: {replay.summary()}",
        *(f"   {problem.message}" for problem in replay.problems),
        "",
        "== see every turn on one page (add --open to open it in a browser):",
        f"   modeltap view {shlex.quote(str(out))}",
        *(() if args.out else ("   (the next modeltap demo replaces this directory)",)),
    )
    return 1 if replay.problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``modeltap`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # What Python prints of a record no handler takes (WARNING and up), escaped: a
    # log line of mitmproxy's or ours may quote a value from the wire.
    logging.lastResort = TerminalLogHandler()
    if argv[:1] == ["report"]:
        from modeltap.report import report

        return report.main(argv[1:])
    if argv[:1] == ["replay"]:
        return replay_main(argv[1:])
    if argv[:1] == ["demo"]:
        return demo_main(argv[1:])
    if argv[:1] == ["view"]:
        from modeltap.report import view

        return view.main(argv[1:])
    if argv[:1] == ["check"]:
        from modeltap.report import check

        return check.main(argv[1:])
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        hint = misspelt_option_hint(extra) if args.command == "run" else None
        if hint is None:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        print_lines(f"modeltap run: {hint}", stderr=True)
        return 2
    if args.command == "run":
        return run(args)
    if args.command == "session":
        return end_session(Path(args.out), args.session_id)
    return 2


def end_session(out: Path, session_id: str) -> int:
    """``modeltap session end ID --out DIR``: end a session on the proxy writing to DIR.

    Prints the session's ``sessions.jsonl`` line. A session no model request
    was audited in (the agent bypassed the proxy, or every request of it was
    refused) is ended too, its line says "No outbound model requests
    captured; audit unsupported", and stderr says so: exit 1, as
    ``modeltap check`` will fail it. Exits 1 too when no proxy runs there.
    """
    from modeltap.app import control
    from modeltap.evidence.records import to_json_line

    try:
        ended = control.end_session(out, session_id)
    except control.ControlError as e:
        print_lines(f"modeltap: {e}", stderr=True)
        return 1
    code = 0
    for end in ended:
        if not end.now:
            print_lines(
                f"modeltap: session {session_id!r} had already ended; this is its status "
                "from then (nothing was written)",
                stderr=True,
            )
        if end.status.requests_audited == 0:
            print_lines(
                f"modeltap: no model request of session {session_id!r} was audited: "
                f"{end.status.message} (did the agent's requests go through the proxy?); "
                "modeltap check fails it",
                stderr=True,
            )
            code = 1
        print_document(to_json_line(end.status).decode())
    return code


if __name__ == "__main__":
    sys.exit(main())
