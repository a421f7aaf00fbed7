"""modeltap's options, declared once.

Every option is one row of :data:`OPTIONS`: its name, type, default, choices
and one paragraph of help. Everything that takes options reads that row, so
their help, defaults and choices cannot drift apart:

- the addons' ``load`` (:func:`declare`): ``mitmdump -s addons/modeltap.py
  --set modeltap_NAME=...`` and ``mitmdump --options``;
- ``modeltap run`` and ``modeltap replay`` (:func:`add_arguments`): ``--name``;
- :class:`modeltap.app.proxy.ProxyConfig` and the pytest plugin
  (:func:`config_values`), which take the option names and the command
  line's spellings alike (``max_body`` or ``max-body``, ``routes`` or
  ``route``, ``listen="HOST:PORT"`` or ``listen_host`` and ``listen_port``).

mitmproxy enforces ``choices`` only on its own command line, never for
``--set`` in a script or ``options.update``: the addons call :func:`check` in
``configure`` and turn its ``ValueError`` into ``OptionsError``.

A little over 500 lines, on purpose: two thirds of it is the table, one
paragraph of help per option (the user documentation); its readers stay
beside it so that a row and the code that reads it change together.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from modeltap.evidence.records import DEFAULT_OUT
from modeltap.rules.failures import DEFAULT_UPSTREAM_TIMEOUT, Timeouts, parse_seconds
from modeltap.rules.failures import parse_upstream_timeout as _parse_upstream_timeout

#: mitmproxy's own options that modeltap sets but does not declare.
MITMPROXY_OWN: Final = frozenset({"proxyauth", "ssl_insecure"})

RUN, REPLAY = "run", "replay"


def parse_address(value: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[v6]:PORT``; an empty host is 127.0.0.1), or a
    bare ``PORT``: that port on loopback (``9000`` is ``127.0.0.1:9000``).

    Raises:
        ValueError: it is not ``HOST:PORT`` or ``PORT`` with a port from 0 to
            65535 (the message quotes the value: it is the user's own option).
    """
    if value.isdigit() and value.isascii():
        value = f"127.0.0.1:{value}"
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{value!r} is not HOST:PORT; use HOST:PORT, e.g. 127.0.0.1:8787")
    if int(port) > 65535:
        raise ValueError(f"port {int(port)} in {value!r} is out of range (0 to 65535)")
    return host.strip("[]") or "127.0.0.1", int(port)


def _address(value: str) -> str:
    host, port = parse_address(value)
    return f"{host}:{port}"


def _upstream_timeout(value: str) -> str:
    _parse_upstream_timeout(value)
    return value


def _client_timeout(value: str) -> str:
    parse_seconds(value, "client")
    return value


def _size(value: str) -> str:
    """A size as mitmproxy reads one (``human.parse_size``: bytes, or a whole
    number with ``b``, ``k``, ``m``, ``g`` or ``t``, powers of 1024), above zero;
    checked here so the command line names its own flag, not the addon option."""
    digits = value[:-1] if value[-1:] in ("b", "k", "m", "g", "t") else value
    if not digits.isdigit() or not digits.isascii() or int(digits) <= 0:
        raise ValueError(f"{value!r} is not a size such as 64m, 512k or 1048576")
    return value


def tool_budget(value: str | int | None) -> int | None:
    """A ``--max-tool-calls`` budget: a whole number, 0 or more (0: no tool call
    may be answered), or None for no budget.

    Raises:
        ValueError: anything else (the message quotes the value).
    """
    if value is None or (isinstance(value, int) and value >= 0):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise ValueError(f"{value!r} is not a number of tool calls (a whole number, 0 or more)")


@dataclass(frozen=True, slots=True)
class Option:
    """One option, as every reader of options sees it.

    ``name`` is the :class:`~modeltap.app.proxy.ProxyConfig` field and the pytest
    plugin's key; ``mitm`` the mitmproxy option (``modeltap_`` + name unless
    given; ``None`` when mitmproxy has no such option); ``flag`` the command
    line's (``--`` + name with dashes unless given).
    """

    name: str
    type: Any
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    flag: str | None = None
    short: str | None = None
    mitm: str | None = ""
    #: The commands that take it (``run``, ``replay``).
    commands: frozenset[str] = frozenset({RUN})
    #: Checks (and normalises) a command-line value; raises ``ValueError``.
    parse: Callable[[str], Any] | None = None
    #: Only the command line takes it: what the command does around the proxy
    #: (``--ui``), not a ``ProxyConfig`` field or a mitmproxy option.
    cli_only: bool = False
    #: ``(command, default)`` pairs where a command's default differs from
    #: ``default`` (``replay`` writes beside, never into, a run's ``--out``).
    command_defaults: tuple[tuple[str, Any], ...] = ()

    def default_for(self, command: str) -> Any:
        """The default on ``command``'s command line."""
        return dict(self.command_defaults).get(command, self.default)

    @property
    def mitm_name(self) -> str | None:
        """The mitmproxy option's name, or None."""
        if self.mitm is None:
            return None
        return self.mitm or f"modeltap_{self.name}"

    @property
    def cli_flag(self) -> str:
        """The command line's flag, e.g. ``--max-body``."""
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def cli_name(self) -> str:
        """The command line's name for it, as argparse stores it (``route``)."""
        return self.cli_flag.removeprefix("--").replace("-", "_")

    @property
    def repeated(self) -> bool:
        """Whether it is a list, given once per value on the command line."""
        return bool(self.type == Sequence[str])


OPTIONS: Final[tuple[Option, ...]] = (
    Option(
        "listen",
        str,
        "127.0.0.1:8787",
        "Address the proxy listens on, as HOST:PORT (port 0: a free one), or PORT alone for "
        "that port on 127.0.0.1 (--listen 9000 is 127.0.0.1:9000). Loopback unless told "
        "otherwise: anyone who can reach the port can use the proxy.",
        metavar="HOST:PORT",
        mitm=None,
        commands=frozenset({RUN, REPLAY}),
        parse=parse_address,
    ),
    Option(
        "out",
        str,
        DEFAULT_OUT,
        "Directory for audit.jsonl, events.jsonl and sessions.jsonl. Lines are appended, one "
        "whole line per write, so several proxies may share it. modeltap replay has its own "
        "default, so a replay is never appended to the recorded run's files.",
        metavar="DIR",
        commands=frozenset({RUN, REPLAY}),
        command_defaults=((REPLAY, "./modeltap-replay"),),
    ),
    Option(
        "mode",
        str | None,
        None,
        "reverse (modeltap run's default): agents point their base URL at the route "
        "prefixes. regular: modeltap is the agent's HTTP(S) proxy (trust mitmproxy's CA); "
        "provider hosts are audited (Azure, Bedrock and Vertex hosts too), other hosts pass "
        "as unaudited. AWS SigV4-signed requests (boto3, AnthropicBedrock, Claude Code on "
        "Bedrock) need regular mode, which forwards them unchanged; reverse mode refuses them "
        "(signed_request). Under mitmdump, unset follows mitmproxy's own --mode: regular (and "
        "the other modes where the client names the host) as regular; reverse:URL as reverse, "
        "with URL mounted at / like --upstream unless modeltap_upstream is set.",
        choices=("reverse", "regular"),
    ),
    Option(
        "routes",
        Sequence[str],
        [],
        "Extra or replacement routes as NAME=URL[,provider=P], mounted at /NAME (e.g. "
        "azure=https://RESOURCE.openai.azure.com, "
        "bedrock=https://bedrock-runtime.REGION.amazonaws.com, "
        "vertex=https://REGION-aiplatform.googleapis.com). provider=P names the route's "
        "gen_ai.provider.name (default: from the upstream host, else the provider of the API "
        "it speaks). Defaults: openai=https://api.openai.com, anthropic=https://api.anthropic.com, "
        "gemini=https://generativelanguage.googleapis.com.",
        metavar="NAME=URL[,provider=P]",
        flag="--route",
    ),
    Option(
        "upstream",
        str | None,
        None,
        "One upstream mounted at / (shorthand for a single route), e.g. http://127.0.0.1:8000.",
        metavar="URL",
    ),
    Option(
        "mcp",
        Sequence[str],
        [],
        "A remote MCP server, mounted at /mcp/NAME: point the agent's MCP configuration at "
        "http://127.0.0.1:8787/mcp/NAME (the start-up screen prints the snippet for Claude "
        "Code, Codex and Gemini CLI). URL is the server's endpoint, e.g. "
        "https://mcp.example.com/mcp (Streamable HTTP), or the base of an HTTP+SSE server, "
        "whose /sse then is /mcp/NAME/sse. Every client-to-server JSON-RPC message gets an "
        "audit line (api mcp) before it is forwarded; answers, server requests and "
        "notifications are events; argument values and results are kept only with --record.",
        metavar="NAME=URL",
    ),
    Option(
        "mcp_hosts",
        Sequence[str],
        [],
        "In --mode regular: a host (HOST or HOST:PORT) whose traffic is MCP, audited as --mcp "
        "servers are (the host names the server in the lines).",
        metavar="HOST",
        flag="--mcp-host",
    ),
    Option(
        "upstream_ca",
        str | None,
        None,
        "Also trust this CA (a PEM file of one or more certificates) for upstream TLS, beside "
        "the public roots: a self-hosted vLLM or a corporate gateway with a private CA. Both "
        "modes; checked at start (a missing or unreadable file, or one without a certificate, "
        "stops the start).",
        metavar="FILE",
    ),
    Option(
        "upstream_insecure",
        bool,
        False,
        "Do not verify upstream TLS certificates at all (mitmproxy's ssl_insecure): anyone on "
        "the path can then answer as the upstream. For a quick look only; prefer "
        "--upstream-ca. The start-up screen warns, and every sessions.jsonl line says "
        "upstream_insecure: true.",
        mitm="ssl_insecure",
    ),
    Option(
        "strict",
        bool,
        False,
        "Refuse requests that are not auditable model requests (other than GET .../models) "
        "instead of passing them through as unaudited.",
    ),
    Option(
        "fail_closed",
        bool,
        False,
        "After the first refusal in a session, refuse every further model request of that "
        "session, so an eval never continues on partial evidence.",
    ),
    Option(
        "image_detail",
        str | None,
        None,
        "Rewrite every outgoing image's detail to low, high or auto before forwarding; the "
        "audit record shows the value sent. A SigV4-signed request is never rewritten: one "
        "that would be is refused (signed_request_rewrite).",
        choices=("low", "high", "auto"),
        commands=frozenset({RUN, REPLAY}),
    ),
    Option(
        "max_body",
        str,
        "64m",
        "Largest request body, as sent and after content decoding (which stops there), "
        "pass-through requests too, and largest WebSocket message, after permessage-deflate "
        "(e.g. 64m, 512k). A bigger body is refused with 413 as soon as it passes the limit; a "
        "bigger message closes the WebSocket with 1009.",
        metavar="SIZE",
        parse=_size,
    ),
    Option(
        "session",
        str | None,
        None,
        "Session id for requests without an x-modeltap-session header (default: the run id).",
        metavar="NAME",
        commands=frozenset({RUN, REPLAY}),
    ),
    Option(
        "continuation",
        str,
        "explicit",
        "WebSocket continuations (previous_response_id, conversation, prompt) that do not "
        "restate their instructions or tools: explicit refuses them; as-sent audits them as "
        "sent, listing the unstated settings in omitted_settings with their fields null. "
        "Over HTTP such requests are always audited as sent.",
        choices=("explicit", "as-sent"),
        commands=frozenset({RUN, REPLAY}),
    ),
    Option(
        "ws_allow",
        Sequence[str],
        [],
        "Extra WebSocket message types forwarded as control messages (logged as ws_control) "
        "besides response.processed.",
        metavar="TYPE",
    ),
    Option(
        "max_tool_calls",
        int | None,
        None,
        "Tool-call budget per session: once the model has asked for N tool calls and the "
        "request carrying the Nth result was let through, every further model request of "
        "the session is refused (rule tool_budget_exceeded). An MCP tools/call counts too, "
        "once with the model's call it runs (one no model call asked for is a call of its "
        "own): one beyond the budget is refused before it reaches the server.",
        metavar="N",
        parse=tool_budget,
    ),
    Option(
        "otlp",
        str | None,
        None,
        "Export spans and GenAI metrics over OTLP to this endpoint: http(s)://host:4318 "
        "for OTLP/HTTP protobuf (/v1/traces, /v1/metrics), grpc://host:4317 for gRPC. "
        "Unset: the standard OTEL_EXPORTER_OTLP_* variables decide; with none set, "
        "nothing is exported. OTEL_METRICS_EXPORTER=none keeps metrics off (a "
        "traces-only backend such as Jaeger).",
        metavar="URL",
    ),
    Option(
        "otlp_logs",
        bool,
        True,
        "With an OTLP endpoint, also export every audit.jsonl, events.jsonl and "
        "sessions.jsonl line as an OTLP log record: the body is the line, byte for byte, "
        "linked to its exchange's span. Never waits for the collector; what it did not "
        "acknowledge is counted (at exit, and otlp_logs_dropped in each session line). "
        "OTEL_LOGS_EXPORTER=none turns it off too.",
    ),
    Option(
        "capture_content",
        bool,
        False,
        "Put prompt and output content into spans, in the GenAI conventions' shapes "
        "(gen_ai.input.messages, gen_ai.output.messages, gen_ai.system_instructions, "
        "gen_ai.tool.definitions; 64 KiB each at most, cuts marked). Off by default; also "
        "turned on by OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true. Never into "
        "the JSONL files.",
    ),
    Option(
        "record",
        str | None,
        None,
        "Also record every exchange into this directory for `modeltap replay`: full "
        "request and response bodies (DIR/blobs, content-addressed), stream chunks (SSE, "
        "Bedrock event streams) and WebSocket messages with their timing, indexed in "
        "DIR/recording.jsonl. Only content-type, content-encoding, request-id and Bedrock's "
        "metrics headers are kept, never credentials.",
        metavar="DIR",
    ),
    Option(
        "proxyauth",
        str | None,
        None,
        "Require proxy authentication (mitmproxy's proxyauth, e.g. user:pass) in regular "
        "mode, where clients send Proxy-Authorization; not for reverse mode, where it would "
        "take the Authorization header that carries API keys.",
        metavar="SPEC",
        mitm="proxyauth",
    ),
    Option(
        "control",
        str,
        "127.0.0.1:0",
        "HOST:PORT of the control API (modeltap session end), served apart from the "
        "proxied traffic and only to holders of the run's token; the address and token "
        "are written to control-RUN_ID.json (mode 0600) in the out dir. Port 0: a free one.",
        metavar="HOST:PORT",
        parse=_address,
    ),
    Option(
        "allow_open_proxy",
        bool,
        False,
        "Start even though a forwarding mode (regular, upstream, socks5) listens on a "
        "non-loopback address without proxyauth, relaying anyone's traffic to any host. "
        "Without it, modeltap refuses to start that way.",
    ),
    Option(
        "upstream_timeout",
        str,
        DEFAULT_UPSTREAM_TIMEOUT,
        "Upstream limits in seconds: connect (TCP and TLS set-up), first-byte (from "
        "forwarding the request to the response's first byte) and idle (the longest gap "
        "once the response started), as connect=10,first-byte=540,idle=540 (any subset) or "
        "one number for all three. The defaults let a model think for minutes yet end a "
        "stalled wait before the SDKs' own 600 s read timeout. When a limit passes the agent "
        "gets a 504 (or its stream is cut) and the error event says upstream_timeout. "
        "mitmproxy's tcp_timeout must be longer than every limit.",
        metavar="SPEC",
        parse=_upstream_timeout,
    ),
    Option(
        "client_timeout",
        str,
        f"{Timeouts().request:g}",
        "Longest gap, in seconds, while a client sends a request body; a client that stalls "
        "longer has its connection closed (error event client_timeout).",
        metavar="SECONDS",
        parse=_client_timeout,
    ),
    Option(
        "ui",
        bool,
        False,
        "Serve the page of `modeltap view` live on the control listener (never on the proxy "
        "port), updated as exchanges happen; start-up prints a one-time link.",
        mitm=None,
        cli_only=True,
    ),
    Option(
        "quiet",
        bool,
        False,
        "Do not print one line per exchange on stderr.",
        short="-q",
        commands=frozenset({RUN, REPLAY}),
    ),
)

BY_NAME: Final[dict[str, Option]] = {o.name: o for o in OPTIONS}


def option(name: str) -> Option:
    """The row of option ``name`` (``max_body``).

    Raises:
        KeyError: no such option.
    """
    return BY_NAME[name]


def default(name: str) -> Any:
    """The default value of option ``name``, a fresh copy for lists."""
    value = BY_NAME[name].default
    return list(value) if isinstance(value, list) else value


# --------------------------------------------------------------------------
# mitmproxy: the addons' load() and configure()


def declare(loader: Any, names: Iterable[str]) -> None:
    """Declare options on a mitmproxy ``Loader`` (an addon's ``load``).

    Args:
        loader: mitmproxy's loader.
        names: the options the calling addon owns.
    """
    for name in names:
        opt = BY_NAME[name]
        mitm = opt.mitm_name
        if mitm is None or mitm in MITMPROXY_OWN:
            continue
        loader.add_option(mitm, opt.type, opt.default, opt.help, opt.choices)


def check(options: Any, names: Iterable[str], updated: Iterable[str]) -> None:
    """Check the choices of the updated options (mitmproxy checks them only
    on its own command line).

    Args:
        options: mitmproxy's options.
        names: the options the calling addon owns.
        updated: the names ``configure`` was called with.

    Raises:
        ValueError: ``modeltap_mode must be reverse or regular`` and the like.
    """
    changed = set(updated)
    for name in names:
        opt = BY_NAME[name]
        mitm = opt.mitm_name
        if opt.choices is None or mitm is None or mitm not in changed:
            continue
        value = getattr(options, mitm)
        if value is not None and value not in opt.choices:
            raise ValueError(f"{mitm} must be {_either(opt.choices)}")


def _either(choices: Sequence[str]) -> str:
    return " or ".join([", ".join(choices[:-1]), choices[-1]] if len(choices) > 1 else choices)


# --------------------------------------------------------------------------
# The command line


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """Add ``command``'s options to its parser, in the table's order.

    Args:
        parser: ``modeltap run``'s or ``modeltap replay``'s parser.
        command: ``run`` or ``replay``.
    """
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        flags = [f for f in (opt.short, opt.cli_flag) if f]
        default = opt.default_for(command)
        text = opt.help + _default_note(default)
        if opt.type is bool:
            # A flag that is on by default is turned off with --no-NAME.
            on = default is True
            action = argparse.BooleanOptionalAction if on else "store_true"
            parser.add_argument(*flags, action=action, default=on, help=text)
        elif opt.repeated:
            parser.add_argument(
                *flags, action="append", default=[], metavar=opt.metavar, help=text + " Repeatable."
            )
        else:
            parser.add_argument(
                *flags,
                type=_argparse_type(opt.parse) if opt.parse else str,
                default=opt.parse(default) if opt.parse and default else default,
                choices=opt.choices,
                metavar=opt.metavar if opt.choices is None else None,
                help=text,
            )


def _default_note(default: Any) -> str:
    if default is True:  # a flag that is on: --no-NAME turns it off
        return " On by default."
    return "" if default in (None, False, []) else f" Default: {default}."


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = getattr(parse, "__name__", "value").lstrip("_")
    return convert


# --------------------------------------------------------------------------
# ProxyConfig and the pytest plugin

#: Config keys that are not rows of the table.
_LISTEN_PARTS: Final = ("listen_host", "listen_port")


def config_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Turn option values, by any of their names, into ``ProxyConfig`` fields.

    Accepts the table's names (``max_body``, ``routes``), the command line's
    (``max-body``, ``--max-body``, ``route``), ``listen`` as ``"HOST:PORT"``
    or a ``(host, port)`` pair, and ``listen_host`` / ``listen_port``.

    Args:
        values: option values, e.g. parsed command-line arguments or the
            pytest plugin's merged configuration.

    Returns:
        Keyword arguments for ``ProxyConfig``.

    Raises:
        ValueError: an unknown name (the message lists the known ones), or
            a ``listen`` value that is not ``HOST:PORT``.
    """
    out: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in values.items():
        name = key.lstrip("-").replace("-", "_")
        name = _CLI_NAMES.get(name, name)
        if name in _NEGATED:  # --no-otlp-logs: the option, turned off
            name, value = _NEGATED[name], not value
        if name == "listen":
            try:
                host, port = parse_address(value) if isinstance(value, str) else value
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from None
            out["listen_host"], out["listen_port"] = host, int(port)
        elif name in config_names() or name in _LISTEN_PARTS or name == "extra":
            out[name] = value
        else:
            unknown.append(key)
    if unknown:
        fields = sorted({*config_names(), *_LISTEN_PARTS} - {"listen"})
        raise ValueError(
            f"unknown option(s) {', '.join(sorted(unknown))}; use fields of ProxyConfig: "
            f"{', '.join(fields)}; or modeltap run's names: listen (HOST:PORT), "
            f"{', '.join(sorted(_CLI_NAMES))}"
        )
    return out


_CLI_NAMES: Final[dict[str, str]] = {
    **{o.cli_name: o.name for o in OPTIONS if o.cli_name != o.name and not o.cli_only},
    **{o.short.lstrip("-"): o.name for o in OPTIONS if o.short and not o.cli_only},
}
#: ``no_NAME`` for the flags that are on by default (``--no-otlp-logs``).
_NEGATED: Final[dict[str, str]] = {
    f"no_{o.name}": o.name for o in OPTIONS if o.type is bool and o.default is True
}


def config_names() -> set[str]:
    """The options a ``ProxyConfig`` takes (``listen`` as ``listen_host``/``listen_port``)."""
    return {o.name for o in OPTIONS if not o.cli_only}
