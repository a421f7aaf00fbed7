"""The start-up screen says what is true for the routes in effect (issue 15):
with ``--upstream``, what to export for that upstream, not ``…/openai/v1``
(which leads to api.openai.com). Each line printed is then used, as printed,
by the SDK it is for."""

from __future__ import annotations

import re
from pathlib import Path

import anthropic
import openai
import pytest

from tests.cli_process import CliProcess
from tests.conftest import read_jsonl
from tests.upstream import Upstream

pytest_plugins = ["pytester"]

_EXPORT = re.compile(r"^\s+(?:export\s+)?([A-Z_]+)=(\S+)(.*)$")


def exports(screen: str) -> list[tuple[str, str, str]]:
    """``(variable, value, note)`` of each export line, in order."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  export "))
    found = []
    for line in lines[start:]:
        match = _EXPORT.match(line)
        if match is None:
            break
        found.append((match.group(1), match.group(2), match.group(3).strip()))
    return found


def test_with_upstream_the_screen_exports_the_upstream(tmp_path: Path, upstream: Upstream) -> None:
    with CliProcess("run", "--out", str(tmp_path), "--upstream", upstream.url) as cli:
        assert exports(cli.screen) == [
            ("OPENAI_BASE_URL", f"{cli.url}/v1", "(--upstream, if it speaks OpenAI)"),
            ("ANTHROPIC_BASE_URL", cli.url, "(--upstream, if it speaks Anthropic)"),
            ("GOOGLE_GEMINI_BASE_URL", cli.url, "(--upstream, if it speaks Gemini)"),
        ]
        assert "/openai/v1" not in cli.screen.split("  export ", 1)[1]
        # The default routes stay mounted, and the screen still lists them.
        assert re.search(r"/openai\s+-> https://api.openai.com", cli.screen)
        # Used as printed: each line leads its SDK to the upstream.
        (_, openai_url, _), (_, anthropic_url, _), _ = exports(cli.screen)
        oai = openai.OpenAI(base_url=openai_url, api_key="k", max_retries=0)
        oai.chat.completions.create(model="via-export", messages=[])
        claude = anthropic.Anthropic(base_url=anthropic_url, api_key="k", max_retries=0)
        claude.messages.create(model="claude-via-export", max_tokens=8, messages=[])
    assert [(r["model"], r["route"]) for r in read_jsonl(tmp_path / "audit.jsonl")] == [
        ("via-export", "upstream"),
        ("claude-via-export", "upstream"),
    ]
    assert [r.path for r in upstream.received] == ["/v1/chat/completions", "/v1/messages"]


def test_the_screen_says_where_the_recording_goes(tmp_path: Path) -> None:
    """``--record`` keeps content on disk: the screen says where, beside the files."""
    rec = tmp_path / "rec"
    with CliProcess("run", "--out", str(tmp_path), "--record", str(rec)) as cli:
        files = cli.screen.splitlines().index(
            f"  files      {tmp_path / 'audit.jsonl'}  {tmp_path / 'events.jsonl'}  "
            f"{tmp_path / 'sessions.jsonl'}"
        )
        assert cli.screen.splitlines()[files + 1] == (
            f"  record     {rec}  (full request and response bodies, for replay)"
        )
    with CliProcess("run", "--out", str(tmp_path)) as cli:
        assert "  record " not in cli.screen


def test_named_routes_keep_their_lines_beside_the_upstream(tmp_path: Path) -> None:
    with CliProcess(
        "run", "--out", str(tmp_path), "--upstream", "https://api.openai.com/v1",
        "--route", "vllm=http://127.0.0.1:9/v1",
    ) as cli:  # fmt: skip
        assert exports(cli.screen) == [
            ("OPENAI_BASE_URL", f"{cli.url}/vllm", "(route vllm, if it speaks OpenAI)"),
            ("OPENAI_BASE_URL", cli.url, "(--upstream)"),
        ]


def test_a_route_replacing_a_default_prints_each_variable_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    """``--route openai=URL``: OpenAI's line for it, and no second Anthropic or
    Gemini line; the OpenAI SDK, pointed as printed, reaches the stub."""
    with CliProcess("run", "--out", str(tmp_path), "--route", f"openai={upstream.url}") as cli:
        found = exports(cli.screen)
        assert sorted(found) == [
            ("ANTHROPIC_BASE_URL", f"{cli.url}/anthropic", ""),
            ("GOOGLE_GEMINI_BASE_URL", f"{cli.url}/gemini", "(route gemini)"),
            ("OPENAI_BASE_URL", f"{cli.url}/openai/v1", "(route openai)"),
        ]
        (openai_url,) = [value for variable, value, _ in found if variable == "OPENAI_BASE_URL"]
        client = openai.OpenAI(base_url=openai_url, api_key="k", max_retries=0)
        client.chat.completions.create(model="via-export", messages=[])
    assert [r.path for r in upstream.received] == ["/v1/chat/completions"]


def test_without_upstream_the_default_routes_are_exported(tmp_path: Path) -> None:
    with CliProcess("run", "--out", str(tmp_path)) as cli:
        assert exports(cli.screen) == [
            ("ANTHROPIC_BASE_URL", f"{cli.url}/anthropic", ""),
            ("OPENAI_BASE_URL", f"{cli.url}/openai/v1", ""),
            ("GOOGLE_GEMINI_BASE_URL", f"{cli.url}/gemini", "(route gemini)"),
        ]


def test_each_mcp_server_gets_its_url_and_each_agents_snippet(tmp_path: Path) -> None:
    """SPEC 3b: per --mcp server, the URL through the proxy and the configuration
    of Claude Code, Codex and Gemini CLI (each checked against the CLI itself:
    tests/data/mcp/README.md; Gemini CLI's in tests/test_gemini_cli.py)."""
    with CliProcess(
        "run", "--out", str(tmp_path), "--mcp", "files=https://mcp.example.com/mcp"
    ) as cli:  # fmt: skip
        url = f"{cli.url}/mcp/files"
        lines = cli.screen.splitlines()
        assert re.search(r"/mcp/files\s+-> https://mcp.example.com/mcp", cli.screen)
        start = lines.index(f"  mcp        files: {url}")
        assert lines[start + 1 : start + 5] == [
            f"               Claude Code  claude mcp add --transport http files {url}",
            f'               Codex        [mcp_servers.files] url = "{url}"'
            "  (~/.codex/config.toml)",
            f'               Gemini CLI   {{"mcpServers": {{"files": {{"httpUrl": "{url}"}}}}}}'
            "  (~/.gemini/settings.json)",
            "             (MCP traffic joins x-modeltap-session or --session; else one session "
            "per Mcp-Session-Id)",
        ]
        # An MCP server is configured in the agent: no export line is made up for it.
        assert all("/mcp/" not in value for _, value, _ in exports(cli.screen))


def test_the_fixture_base_urls_follow_the_upstream(
    pytester: pytest.Pytester, upstream: Upstream
) -> None:
    pytester.makepyfile(
        """
        import openai


        def test_openai_base_url_leads_to_the_upstream(modeltap):
            assert modeltap.openai_base_url == modeltap.url + "/v1"
            assert modeltap.anthropic_base_url == modeltap.url
            client = openai.OpenAI(base_url=modeltap.openai_base_url, api_key="k", max_retries=0)
            client.chat.completions.create(model="m", messages=[])
            (record,) = modeltap.capture().records
            assert record.route == "upstream"
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:hypothesispytest", f"--modeltap-upstream={upstream.url}"
    )
    result.assert_outcomes(passed=1)
    assert [r.path for r in upstream.received] == ["/v1/chat/completions"]
