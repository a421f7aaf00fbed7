"""The options table: one row per option, read alike by mitmproxy, the CLI,
ProxyConfig and the pytest plugin."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest
from mitmproxy.test import taddons

from modeltap.app import cli, options
from modeltap.app.proxy import ProxyConfig

MITM_DECLARED = [o for o in options.OPTIONS if o.mitm_name and o.mitm_name.startswith("modeltap_")]

#: Every option's default as the SPEC and the docs state it, written out here
#: rather than read from the table, so that a changed default fails until both
#: (and these lines) say so. Unset is None; an off flag is False.
DEFAULTS: dict[str, Any] = {
    "listen": "127.0.0.1:8787",  # SPEC 1: "starts the proxy on 127.0.0.1:8787"
    "out": "./modeltap-out",  # SPEC 1: "--out DIR (default ./modeltap-out)"
    "mode": None,  # unset: reverse under modeltap run (SPEC 1), mitmproxy's mode under mitmdump
    "routes": [],  # only extras: the openai, anthropic and gemini routes are built in (SPEC 1)
    "upstream": None,
    "mcp": [],  # SPEC 3b: no MCP server is mounted unless --mcp NAME=URL says so
    "mcp_hosts": [],  # SPEC 3b: --mcp-host HOST marks one in --mode regular
    "upstream_ca": None,
    "upstream_insecure": False,
    "strict": False,
    "fail_closed": False,
    "image_detail": None,  # images are forwarded as sent unless told
    "max_body": "64m",  # SPEC 2: "--max-body (default 64 MiB)"; docs/REFUSALS.md: "default 64m"
    "session": None,  # unset: the run id names the session
    "continuation": "explicit",  # SPEC 3: "The default, explicit, refuses such messages"
    "ws_allow": [],
    "max_tool_calls": None,
    "otlp": None,  # the standard OTEL_EXPORTER_OTLP_* variables decide
    "otlp_logs": True,  # SPEC 9: "--otlp-logs, on by default when an OTLP endpoint"
    "capture_content": False,
    "record": None,
    "proxyauth": None,
    "control": "127.0.0.1:0",  # docs/TIMEOUTS.md: "127.0.0.1 on a free port"
    "allow_open_proxy": False,
    "upstream_timeout": "connect=10,first-byte=540,idle=540",  # docs/TIMEOUTS.md's limits table
    "client_timeout": "60",  # docs/TIMEOUTS.md's limits table: --client-timeout S (60)
    "ui": False,
    "quiet": False,
}
#: docs/RECORD-REPLAY.md: replay's "--out defaults to ./modeltap-replay" (never into the run's own).
REPLAY_DEFAULTS = {"out": "./modeltap-replay"}


def test_the_table_gives_every_option_its_documented_default() -> None:
    assert [o.name for o in options.OPTIONS] == list(DEFAULTS)
    for opt in options.OPTIONS:
        assert opt.default == DEFAULTS[opt.name], opt.name
        documented = REPLAY_DEFAULTS.get(opt.name, DEFAULTS[opt.name])
        assert opt.default_for(options.REPLAY) == documented, opt.name


class Declares:
    """An addon that declares every option of the table, as the addons do."""

    def load(self, loader: Any) -> None:
        options.declare(loader, [o.name for o in options.OPTIONS])


def test_proxy_config_has_one_field_per_option_with_its_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(ProxyConfig)}
    rows = options.config_names() - {"listen"}
    assert set(fields) == rows | {"listen_host", "listen_port", "extra"}
    config = ProxyConfig()
    for name in rows:
        assert getattr(config, name) == DEFAULTS[name], name
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 8787)


def test_mitmproxy_sees_the_same_type_default_help_and_choices() -> None:
    with taddons.context(Declares()) as tctx:
        for opt in MITM_DECLARED:
            declared = tctx.options._options[opt.mitm_name]
            assert declared.default == DEFAULTS[opt.name], opt.name
            assert (declared.help, declared.choices) == (opt.help, opt.choices), opt.name
            assert declared.typespec == opt.type
        # Only modeltap_ options are declared: mitmproxy's own (proxyauth, declared by its
        # proxyauth addon, not loaded here) stay mitmproxy's.
        assert "proxyauth" not in tctx.options


def test_mitm_options_set_every_declared_option() -> None:
    config = ProxyConfig(routes=["a=http://127.0.0.1:1"], proxyauth="u:p", max_tool_calls=3)
    values = config.mitm_options()
    assert {o.mitm_name for o in MITM_DECLARED} <= values.keys()
    assert values["modeltap_routes"] == ["a=http://127.0.0.1:1"]
    assert values["modeltap_max_tool_calls"] == 3
    assert values["proxyauth"] == "u:p"
    # Unset, mitmproxy's own option keeps mitmproxy's default.
    assert "proxyauth" not in ProxyConfig().mitm_options()


def parser_for(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, command)
    return parser


def test_the_command_line_takes_each_option_with_its_help_and_default() -> None:
    parser = parser_for(options.RUN)
    actions = {a.dest: a for a in parser._actions}
    for opt in options.OPTIONS:
        action = actions[opt.cli_name]
        assert action.help is not None and action.help.startswith(opt.help), opt.name
        assert opt.cli_flag in action.option_strings
        shown = DEFAULTS[opt.name]
        if shown not in (None, False, []):  # what --help says the default is
            note = "On by default." if shown is True else f"Default: {shown}."
            assert action.help.endswith(note), opt.name
        assert action.choices == (list(opt.choices) if opt.choices else None) or (
            tuple(action.choices or ()) == opt.choices
        )
    parsed = vars(parser.parse_args([]))
    for opt in options.OPTIONS:
        expected = DEFAULTS[opt.name]
        if opt.name == "listen":
            expected = ("127.0.0.1", 8787)  # parsed into host and port
        assert parsed[opt.cli_name] == expected, opt.name
    assert cli.config_from_args(parser.parse_args([])) == ProxyConfig()
    with pytest.raises(ValueError, match="unknown"):
        ProxyConfig.from_options({"ui": True})  # the command's own, not the proxy's


def test_replay_takes_only_its_options() -> None:
    parser = parser_for(options.REPLAY)
    dests = {a.dest for a in parser._actions} - {"help"}
    assert dests == {"listen", "out", "image_detail", "session", "continuation", "quiet"}
    parsed = vars(parser.parse_args([]))
    assert parsed.pop("listen") == ("127.0.0.1", 8787)
    assert parsed == {name: REPLAY_DEFAULTS.get(name, DEFAULTS[name]) for name in parsed}


def test_command_line_values_are_checked_and_normalised() -> None:
    parser = parser_for(options.RUN)
    args = parser.parse_args(
        ["--listen", "[::1]:0", "--control", ":9", "--route", "a=http://x", "--route", "b=http://y"]
    )
    config = cli.config_from_args(args)
    assert (config.listen_host, config.listen_port) == ("::1", 0)
    assert config.control == "127.0.0.1:9"
    assert config.routes == ["a=http://x", "b=http://y"]
    for bad in (
        ["--listen", "nowhere"],
        ["--listen", "h:99999"],
        ["--mode", "sideways"],
        ["--upstream-timeout", "read=5"],
        ["--client-timeout", "0"],
        ["--max-tool-calls", "many"],
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
def test_a_tool_budget_is_a_whole_number(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--max-tool-calls -1`` used to start, with a budget that acted as 0;
    ``many`` was answered with Python's ``invalid literal for int()``."""
    parser = argparse.ArgumentParser(prog="modeltap run")
    options.add_arguments(parser, options.RUN)
    assert parser.parse_args(["--max-tool-calls", "0"]).max_tool_calls == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-tool-calls", value])
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"modeltap run: error: argument --max-tool-calls: {value!r} is not a number of "
        "tool calls (a whole number, 0 or more)"
    )


def test_help_says_a_flag_is_on_not_true() -> None:
    parser = argparse.ArgumentParser(prog="modeltap run")
    options.add_arguments(parser, options.RUN)
    text = " ".join(parser.format_help().split())
    assert "Default: True" not in text
    assert "OTEL_LOGS_EXPORTER=none turns it off too. On by default." in text


def test_config_values_take_the_command_lines_names_too() -> None:
    config = ProxyConfig.from_options(
        {"listen": "127.0.0.1:0", "route": ["a=http://x"], "max-body": "1m", "--fail-closed": True}
    )
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 0)
    assert (config.routes, config.max_body, config.fail_closed) == (["a=http://x"], "1m", True)
    assert ProxyConfig.from_options({"listen": ("0.0.0.0", 1)}).listen_host == "0.0.0.0"
    with pytest.raises(ValueError, match=r"unknown option\(s\) colour; use fields of ProxyConfig:"):
        ProxyConfig.from_options({"colour": "blue", "out": "x"})
    with pytest.raises(ValueError, match="HOST:PORT"):
        ProxyConfig.from_options({"listen": "localhost"})
    # A port alone is that port on loopback, as on the command line.
    assert ProxyConfig.from_options({"listen": "8787"}).listen_host == "127.0.0.1"


def test_check_refuses_values_outside_the_choices() -> None:
    with taddons.context(Declares()) as tctx:
        names = [o.name for o in options.OPTIONS]
        options.check(tctx.options, names, {"modeltap_image_detail"})  # None is allowed
        for mitm, value, message in (
            ("modeltap_mode", "sideways", "modeltap_mode must be reverse or regular"),
            ("modeltap_image_detail", "huge", "modeltap_image_detail must be low, high or auto"),
            ("modeltap_continuation", "x", "modeltap_continuation must be explicit or as-sent"),
        ):
            tctx.options.update(**{mitm: value})  # mitmproxy itself lets it through
            with pytest.raises(ValueError, match=message):
                options.check(tctx.options, names, {mitm})
            # Only the options the caller owns, and only updated ones, are checked.
            options.check(tctx.options, names, set())
            options.check(tctx.options, ["out"], {mitm})
            tctx.options.update(**{mitm: options.option(mitm.removeprefix("modeltap_")).default})


def test_parse_address() -> None:
    assert options.parse_address("[::1]:8787") == ("::1", 8787)
    assert options.parse_address(":0") == ("127.0.0.1", 0)
    assert options.parse_address("9000") == ("127.0.0.1", 9000)  # a port alone: loopback
    for bad in ("host", "host:", "host:http", "-1", "٩"):
        with pytest.raises(ValueError, match=f"'{bad}' is not HOST:PORT"):
            options.parse_address(bad)
    with pytest.raises(ValueError, match=r"port 70000 in 'h:70000' is out of range \(0 to 65535\)"):
        options.parse_address("h:70000")


def test_default_lists_are_fresh_copies() -> None:
    first = options.default("routes")
    first.append("x")
    assert options.default("routes") == []
    assert ProxyConfig().routes == [] and ProxyConfig().routes is not ProxyConfig().routes


def test_every_flag_of_modeltap_run_is_a_config_key() -> None:
    """The pytest plugin takes `modeltap run --help`'s spellings (issue 15): every flag,
    with or without its dashes, the short ones and the --no- ones included."""
    parser = cli.build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    cli_only = {o.cli_flag for o in options.OPTIONS if o.cli_only}
    for action in run._actions:
        for flag in action.option_strings:
            if flag in ("-h", "--help") or flag in cli_only:
                continue
            sample = "127.0.0.1:0" if action.dest in ("listen", "control") else True
            for key in (flag, flag.lstrip("-")):
                values = options.config_values({key: sample})
                assert values, key
    assert options.config_values({"--no-otlp-logs": True}) == {"otlp_logs": False}
    assert options.config_values({"-q": True, "upstream-ca": "ca.pem"}) == {
        "quiet": True,
        "upstream_ca": "ca.pem",
    }
