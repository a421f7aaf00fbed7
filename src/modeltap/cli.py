"""``modeltap run | report | view | ...``: the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from modeltap import __version__
from modeltap.client_env import export_lines
from modeltap.failures import (
    DEFAULT_UPSTREAM_TIMEOUT,
    Timeouts,
    parse_seconds,
    parse_upstream_timeout,
)
from modeltap.listening import is_loopback, open_proxy_listeners, open_proxy_message
from modeltap.proxy import Proxy, ProxyConfig
from modeltap.routing import RouteError, RouteTable


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError("use HOST:PORT, e.g. 127.0.0.1:8787")
    return host.strip("[]") or "127.0.0.1", int(port)


def _upstream_timeout(value: str) -> str:
    try:
        parse_upstream_timeout(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _client_timeout(value: str) -> str:
    try:
        parse_seconds(value, "client")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modeltap",
        description="A capture proxy beside an AI agent: audit every model request before "
        "it is forwarded, observe what comes back, export OpenTelemetry spans.",
    )
    parser.add_argument("--version", action="version", version=f"modeltap {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the proxy", description="Start the capture proxy.")
    run.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8787),
        metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:8787; loopback unless told otherwise)",
    )
    run.add_argument(
        "--out",
        default="./modeltap-out",
        metavar="DIR",
        help="directory for audit.jsonl and events.jsonl (default ./modeltap-out)",
    )
    run.add_argument(
        "--mode",
        choices=("reverse", "regular"),
        default="reverse",
        help="reverse: point SDK base URLs at the route prefixes (default); regular: be the "
        "agent's HTTPS_PROXY (needs mitmproxy's CA); provider hosts are audited, others "
        "pass through as unaudited",
    )
    run.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="NAME=URL[,provider=P]",
        help="add or replace a route mounted at /NAME (repeatable), e.g. "
        "--route vllm=http://127.0.0.1:8000; provider=P names its gen_ai.provider.name "
        "(default: from the upstream host, else the provider of the API it speaks)",
    )
    run.add_argument(
        "--upstream", metavar="URL", help="one upstream mounted at / (single-route shorthand)"
    )
    run.add_argument(
        "--strict",
        action="store_true",
        help="refuse requests that are not auditable model requests (GET .../models still "
        "passes) instead of logging them as unaudited",
    )
    run.add_argument(
        "--fail-closed",
        action="store_true",
        help="after the first refusal in a session, refuse every further model request of it",
    )
    run.add_argument(
        "--image-detail",
        choices=("low", "high", "auto"),
        help="rewrite every outgoing image's detail before forwarding",
    )
    run.add_argument(
        "--max-body",
        default="64m",
        metavar="SIZE",
        help="largest request body (as sent and after content decoding; pass-through "
        "requests too) or WebSocket message, e.g. 64m (default); larger bodies get 413 as "
        "soon as they pass it, larger messages close the WebSocket (1009)",
    )
    run.add_argument(
        "--session",
        metavar="NAME",
        help="session id for requests without an x-modeltap-session header (default: the run)",
    )
    run.add_argument(
        "--continuation",
        choices=("explicit", "as-sent"),
        default="explicit",
        help="WebSocket continuations (previous_response_id, conversation, prompt) that do not "
        "restate instructions/tools: explicit refuses them (default); as-sent audits them as "
        "sent, listing what was not stated in omitted_settings. HTTP continuations are always "
        "audited as sent",
    )
    run.add_argument(
        "--ws-allow",
        action="append",
        default=[],
        metavar="TYPE",
        help="extra WebSocket message type forwarded as a control message (repeatable; "
        "response.processed is always allowed)",
    )
    run.add_argument(
        "--max-tool-calls",
        type=int,
        metavar="N",
        help="tool-call budget per session: after the request carrying the Nth call's result, "
        "further model requests of the session are refused (tool_budget_exceeded)",
    )
    run.add_argument(
        "--otlp",
        metavar="URL",
        help="export spans and GenAI metrics over OTLP: http://host:4318 (OTLP/HTTP) or "
        "grpc://host:4317; default: the standard OTEL_EXPORTER_OTLP_* variables, else no "
        "export (OTEL_METRICS_EXPORTER=none: spans only)",
    )
    run.add_argument(
        "--otlp-logs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with an OTLP endpoint, also export every audit, events and sessions line as an "
        "OTLP log record (body = the line; default on). Export never waits; what the collector "
        "did not acknowledge is counted at exit and in each session line (otlp_logs_dropped)",
    )
    run.add_argument(
        "--capture-content",
        action="store_true",
        help="put prompt and output content into spans, in the GenAI conventions' shapes "
        "(also OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true); never into the "
        "JSONL files",
    )
    run.add_argument(
        "--record",
        metavar="DIR",
        help="also keep full exchanges in DIR for `modeltap replay DIR` (bodies, SSE chunks "
        "and WebSocket messages with their timing; never credentials)",
    )
    run.add_argument(
        "--proxyauth",
        metavar="SPEC",
        help="require proxy authentication (mitmproxy's proxyauth, e.g. user:pass) in "
        "--mode regular, where clients send Proxy-Authorization; not for reverse mode, where "
        "it would take the Authorization header that carries API keys",
    )
    run.add_argument(
        "--control",
        type=_listen,
        default=("127.0.0.1", 0),
        metavar="HOST:PORT",
        help="the control API's own listener (default 127.0.0.1 on a free port); never served "
        "on the proxy port, and only to holders of the run's token, which is written with "
        "the address to control-RUN_ID.json (mode 0600) in the out dir",
    )
    run.add_argument(
        "--allow-open-proxy",
        action="store_true",
        help="start --mode regular on a non-loopback address without --proxyauth anyway: "
        "anyone who can reach the port can relay traffic through it to any host (refused "
        "without this flag)",
    )
    run.add_argument(
        "--upstream-timeout",
        type=_upstream_timeout,
        default=DEFAULT_UPSTREAM_TIMEOUT,
        metavar="SPEC",
        help="upstream limits in seconds, connect=S,first-byte=S,idle=S (any subset) or one "
        f"number for all three (default {DEFAULT_UPSTREAM_TIMEOUT}: minutes of model thinking "
        "pass, yet a stalled upstream is ended before the SDKs' own 600 s timeout); when one "
        "passes the agent gets a 504 or its stream is cut, and the error is upstream_timeout",
    )
    run.add_argument(
        "--client-timeout",
        type=_client_timeout,
        default=f"{Timeouts().request:g}",
        metavar="SECONDS",
        help=f"longest gap while a client sends a request body (default {Timeouts().request:g}); "
        "a client that stalls longer is disconnected (error client_timeout)",
    )
    run.add_argument(
        "--ui",
        action="store_true",
        help="serve the page of `modeltap view` live on the control listener (never on the "
        "proxy port), updated as exchanges happen; start-up prints a one-time link",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no per-exchange lines on stderr")

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
        default="./modeltap-out",
        metavar="DIR",
        help="the running proxy's --out (default ./modeltap-out)",
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
    # Listed for --help; main() hands their arguments to modeltap.replay.
    sub.add_parser("replay", help="answer an agent from a --record directory", add_help=False)
    sub.add_parser("demo", help="a scripted agent replayed through modeltap", add_help=False)
    sub.add_parser("view", help="write a capture as one self-contained HTML page", add_help=False)
    return parser


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """Turn parsed ``run`` arguments into a :class:`ProxyConfig`."""
    host, port = args.listen
    return ProxyConfig(
        listen_host=host,
        listen_port=port,
        out=args.out,
        mode=args.mode,
        routes=list(args.route),
        upstream=args.upstream,
        strict=args.strict,
        fail_closed=args.fail_closed,
        image_detail=args.image_detail,
        max_body=args.max_body,
        session=args.session,
        quiet=args.quiet,
        continuation=args.continuation,
        ws_allow=list(args.ws_allow),
        otlp=args.otlp,
        otlp_logs=args.otlp_logs,
        max_tool_calls=args.max_tool_calls,
        capture_content=args.capture_content,
        record=args.record,
        control=f"{args.control[0]}:{args.control[1]}",
        upstream_timeout=args.upstream_timeout,
        client_timeout=args.client_timeout,
        proxyauth=args.proxyauth,
        allow_open_proxy=args.allow_open_proxy,
    )


def startup_screen(proxy: Proxy, ui_link: str | None = None) -> str:
    """The one-screen summary printed at start (SPEC section 1)."""
    cfg = proxy.config
    routes = RouteTable.build(cfg.routes, cfg.upstream)
    url = proxy.url
    out = Path(cfg.out)
    lines = [f"modeltap {__version__}  run {proxy.addon.run_id}"]
    if cfg.mode == "regular":
        lines.append(f"  listening  {url}  (forward proxy)")
        lines.append("  audited    " + ", ".join(f"{r.host}:{r.port}" for r in routes.routes))
        lines.append("  export     HTTPS_PROXY=" + url + "  HTTP_PROXY=" + url)
        confdir = proxy.master.options.confdir if proxy.master else "~/.mitmproxy"
        ca = Path(confdir).expanduser() / "mitmproxy-ca-cert.pem"
        lines.append(f"  CA cert    {ca}  (trust it, e.g. SSL_CERT_FILE / NODE_EXTRA_CA_CERTS)")
    else:
        lines.append(f"  listening  {url}  (reverse proxy)")
        width = max(len(r.prefix) for r in routes.routes)
        for i, r in enumerate(routes.routes):
            head = "  routes     " if i == 0 else "             "
            lines.append(f"{head}{r.prefix.ljust(width)}  -> {r.url}")
        found = export_lines(routes.routes, url)
        exports = [e.text for e in found]
        for r in routes.routes:
            if all(e.route != r.name for e in found):
                exports.append(f"{r.name}: {url}{'' if r.prefix == '/' else r.prefix}")
        for i, e in enumerate(exports):
            lines.append(("  export     " if i == 0 else "             ") + e)
    lines.append(f"  files      {out / 'audit.jsonl'}  {out / 'events.jsonl'}")
    lines.append(
        f"  control    {proxy.control_url}  (modeltap session end ID --out {out}; "
        "token in the out dir)"
    )
    if ui_link is not None:
        lines.append(f"  ui         {ui_link}  (one-time link to the live page)")
    lines.append(f"  {proxy.addon.telemetry.describe()}")
    lines.append(f"  {proxy.addon.telemetry.describe_logs()}")
    timeouts = proxy.addon.deadlines.timeouts
    lines.append(
        f"  timeouts   upstream {timeouts.describe_upstream()}; client body idle "
        f"{timeouts.request:g} s"
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
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the proxy in the foreground until Ctrl-C or SIGTERM; exit 0 after flushing."""
    try:
        RouteTable.build(list(args.route), args.upstream)
    except RouteError as e:
        print(f"modeltap: {e}", file=sys.stderr)
        return 2
    host, port = args.listen
    open_ones = open_proxy_listeners([(args.mode, host, port)], args.proxyauth)
    if open_ones and not args.allow_open_proxy:
        fix = "listen on 127.0.0.1, add --proxyauth USER:PASS, or pass --allow-open-proxy"
        print(f"modeltap: {open_proxy_message(open_ones, fix)}", file=sys.stderr)
        return 2
    proxy = Proxy(config_from_args(args))

    def ready(p: Proxy) -> None:
        print(startup_screen(p, serve_ui(p) if args.ui else None), file=sys.stderr, flush=True)

    try:
        proxy.run_foreground(on_ready=ready)
    except Exception as e:  # bad options or a port in use: say it plainly
        print(f"modeltap: {e}", file=sys.stderr)
        return 1
    counts = proxy.addon.counts
    print(
        f"modeltap: stopped. audited {counts['audited']}, refused {counts['refused']}, "
        f"unaudited {counts['unaudited']}, errors {counts['errors']}.",
        file=sys.stderr,
    )
    for line in (proxy.addon.telemetry_summary or "").splitlines():
        print(f"modeltap: {line}", file=sys.stderr)
    return 0


def serve_ui(proxy: Proxy) -> str | None:
    """Add the live page to the running control listener; its one-time link."""
    from modeltap.view.live import LivePage

    server = proxy.addon.control
    if server is None:
        return None
    page = LivePage(Path(proxy.config.out), server.token, server.url)
    server.routes.append(page)
    return page.new_link()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``modeltap`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        from modeltap import report

        return report.main(argv[1:])
    if argv[:1] == ["replay"]:
        from modeltap.replay import replay_main

        return replay_main(argv[1:])
    if argv[:1] == ["demo"]:
        from modeltap.replay import demo_main

        return demo_main(argv[1:])
    if argv[:1] == ["view"]:
        from modeltap import view

        return view.main(argv[1:])
    if argv[:1] == ["check"]:
        from modeltap import check

        return check.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run(args)
    if args.command == "session":
        return end_session(Path(args.out), args.session_id)
    return 2


def end_session(out: Path, session_id: str) -> int:
    """``modeltap session end ID --out DIR``: end a session on the proxy writing to DIR.

    Prints the session's ``sessions.jsonl`` line; exits 1 when no proxy runs
    there or none knows the session (nothing is written then).
    """
    from modeltap import control
    from modeltap.records import to_json_line

    try:
        ended = control.end_session(out, session_id)
    except control.ControlError as e:
        print(f"modeltap: {e}", file=sys.stderr)
        return 1
    for end in ended:
        if not end.now:
            print(
                f"modeltap: session {session_id!r} had already ended; this is its status "
                "from then (nothing was written)",
                file=sys.stderr,
            )
        sys.stdout.write(to_json_line(end.status).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
