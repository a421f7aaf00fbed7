"""``modeltap view`` without a browser: the page data, the page's safety, the command.

The captures are real (the proxy driven by the SDKs, see ``view_captures``);
what the page draws from this data is checked in a browser in
``test_view_browser.py``.
"""

from __future__ import annotations

import base64
import hashlib
import html as html_module
import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.app.cli import main as cli_main
from modeltap.evidence.capture import Capture
from modeltap.evidence.records import AuditRecord, HostedTool
from modeltap.report.view import build_page, build_view_data, render_page, turn_changes
from modeltap.report.view.page import asset, content_security_policy, json_for_script
from tests.factories import audit_record
from tests.view_captures import (
    INJECT_ARGUMENTS,
    INJECT_SESSION,
    SECRET_PROMPT,
    Made,
    make_long_capture,
    rich_capture,
)

__all__ = ["rich_capture"]  # the fixture, used by name

DATA_BLOCK = re.compile(
    r'<script type="application/json" id="modeltap-data">(.*?)</script>', re.DOTALL
)


def page_data(html: str) -> Any:
    match = DATA_BLOCK.search(html)
    assert match is not None
    return orjson.loads(match.group(1))


def session(data: Any, sid: str) -> Any:
    return next(s for s in data["sessions"] if s["id"] == sid)


# --------------------------------------------------------------------------
# The data: what the page is given is what Capture reads


def test_data_is_the_captures_evidence(rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    data = build_view_data(capture)

    assert data["format"] == "modeltap-view/1"
    assert [s["id"] for s in data["sessions"]] == list(capture.sessions)
    assert data["capture"]["evidence_complete"] == capture.evidence_complete
    assert data["capture"]["capture_errors"] == capture.capture_errors
    for s in capture.sessions.values():
        shown = session(data, s.session_id)
        assert shown["stop_reason"] == s.stop_reason
        assert shown["evidence_complete"] == s.evidence_complete
        for name in ("events", "actions", "messages", "usage", "status", "data"):
            channel = s.coverage.channel(name)
            assert shown["coverage"][name] == {
                "status": channel.status,
                "reasons": list(channel.reasons),
            }
        assert [t["index"] for t in shown["turns"]] == [t.index for t in s.turns]
        for turn, item in zip(s.turns, shown["turns"], strict=True):
            assert item["record"]["body_sha256"] == turn.record.body_sha256
            assert item["errors"] == turn.errors
            assert item["usage"]["input_tokens"] == turn.usage.input_tokens
            assert [i["result_bytes"] for i in item["invocations"]] == [
                i.result_bytes for i in turn.tool_invocations
            ]


def test_unknown_stays_null(rich_capture: Made) -> None:
    data = build_view_data(Capture.load(rich_capture.out))
    agent = session(data, "agent-1")
    # The 429 attempt has no usage at all; the session total is then unknown, not a sum.
    assert agent["turns"][1]["usage"]["input_tokens"] is None
    assert agent["usage"]["input_tokens"] is None
    # OpenAI chat never reports cache writes.
    assert agent["turns"][0]["usage"]["cache_write_tokens"] is None
    assert session(data, "idle-1")["turns"] == []
    assert session(data, "idle-1")["coverage"]["events"]["status"] == "unavailable"


def test_retries_are_grouped(rich_capture: Made) -> None:
    data = build_view_data(Capture.load(rich_capture.out))
    turns = session(data, "agent-1")["turns"]

    # The SDK retried the 429 with the very same body: one call, two attempts.
    assert turns[1]["response"]["status"] == 429
    assert turns[2]["record"]["body_sha256"] == turns[1]["record"]["body_sha256"]
    assert [t["retry_of"] for t in turns] == [None, None, 1, None]
    assert [t["attempts"] for t in turns] == [1, 2, None, 1]
    # A retry changed nothing.
    assert turns[2]["changes"] == []


def test_same_body_after_a_success_is_not_a_retry(tmp_path: Path) -> None:
    out = make_long_capture(tmp_path / "out", 4)
    data = build_view_data(Capture.load(out))
    turns = data["sessions"][0]["turns"]
    assert all(t["retry_of"] is None for t in turns)


def test_changes_between_turns_of_a_real_agent(rich_capture: Made) -> None:
    data = build_view_data(Capture.load(rich_capture.out))
    turns = session(data, "agent-1")["turns"]
    records = [t["record"] for t in turns]

    assert turns[0]["changes"] == []
    texts = [c["text"] for c in turns[1]["changes"]]
    assert texts == [
        "effort changed: not sent -> low",
        "tools added: get_time",
        f"instructions hash changed: {records[0]['instructions_sha256'][:12]} -> "
        f"{records[1]['instructions_sha256'][:12]}",
        "instruction parts changed: #1 of 1",  # the one system message changed
    ]
    assert [(c["what"], c.get("kind")) for c in turns[3]["changes"]] == [
        ("model", None),
        ("tools", "removed"),
    ]
    assert turns[3]["changes"][0]["text"] == "model changed: gpt-stub -> gpt-stub-mini"
    assert turns[3]["changes"][1]["items"] == ["lookup"]


def _record(**fields: Any) -> AuditRecord:
    """An audit record advertising the tools ``a`` and ``b``, with ``fields`` changed."""
    return audit_record(**({"tool_names": ("a", "b")} | fields))


def test_changes_cover_continuations_hosted_tools_images_and_transport() -> None:
    before = _record()
    after = _record(
        tool_names=None,
        instructions_sha256=None,
        instructions_parts=None,
        omitted_settings=("instructions", "tools"),
        hosted_tools=(HostedTool("web_search", None),),
        image_count=2,
        image_details=("low", None),
        transport="websocket",
        thinking={"type": "adaptive"},
    )
    changes = {c["what"]: c for c in turn_changes(before, after)}
    assert changes["tools"]["kind"] == "unstated"
    assert changes["instructions"]["text"] == (
        "instructions hash changed: 000000000000 -> not stated"
    )
    assert changes["hosted_tools"]["text"] == "hosted tools added: web_search"
    assert changes["images"]["text"] == "images: 0 -> 2"
    assert changes["transport"]["text"] == "transport changed: http -> websocket"
    assert changes["thinking"]["text"] == "thinking changed: not sent -> type=adaptive"
    assert changes["omitted_settings"]["text"] == "settings not stated: instructions, tools"
    back = {c["what"]: c for c in turn_changes(after, before)}
    assert back["tools"]["kind"] == "stated"
    assert back["tools"]["added"] == ["a", "b"]
    assert turn_changes(before, _record(tool_names=("b", "a")))[0]["kind"] == "reordered"
    assert turn_changes(None, before) == []
    assert turn_changes(before, _record(seq=2, ts="2026-01-01T00:00:01.000Z")) == []


# --------------------------------------------------------------------------
# The page: self-contained and safe


def test_page_is_self_contained(rich_capture: Made) -> None:
    html = build_page(rich_capture.out)
    # Nothing to fetch: no external URL in any attribute, no import, no font file.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    for name in ("page.js", "page.css", "page.html"):
        text = asset(name)
        assert "http://" not in text and "https://" not in text, name
        assert "@import" not in text and "url(" not in text, name
    assert "connect-src 'none'" in html_module.unescape(html)


def test_csp_allows_exactly_the_inline_script_and_style(rich_capture: Made) -> None:
    html = build_page(rich_capture.out)
    scripts = re.findall(r"<script>(.*?)</script>", html, re.DOTALL)
    styles = re.findall(r"<style>(.*?)</style>", html, re.DOTALL)
    assert len(scripts) == 1 and len(styles) == 1

    def digest(text: str) -> str:
        return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    policy = content_security_policy(live=False)
    assert f"script-src 'sha256-{digest(scripts[0])}'" in policy
    assert f"style-src 'sha256-{digest(styles[0])}'" in policy
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy


def test_agent_strings_cannot_leave_the_data_block(rich_capture: Made) -> None:
    html = build_page(rich_capture.out)
    # The data block is the only place capture strings live, escaped.
    assert INJECT_SESSION not in html
    assert "</script><script>window.__pwned" not in html
    assert html.count("</script>") == 3  # the two data blocks and the script
    data = page_data(html)
    shown = session(data, INJECT_SESSION)
    assert shown["turns"][0]["invocations"][0]["arguments"] == INJECT_ARGUMENTS


def test_the_script_writes_text_only() -> None:
    """No HTML sink in the page's script: capture strings can only become text."""
    script = asset("page.js")
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "setAttribute('style'",
        "'href'",
        "'src'",
    ):
        assert sink not in script, sink


@given(st.text())
def test_json_for_script_never_closes_the_element(text: str) -> None:
    out = json_for_script({"k": text, text: [text]})
    assert "<" not in out and ">" not in out and "&" not in out
    assert "\u2028" not in out and "\u2029" not in out
    assert orjson.loads(out) == {"k": text, text: [text]}


def test_template_placeholders_in_data_are_not_expanded(tmp_path: Path) -> None:
    data = {"format": "modeltap-view/1", "title": "{{script}}", "x": "{{data}} {{csp}}"}
    html = render_page(data)
    assert html.count(asset("page.js")) == 1
    assert page_data(html)["x"] == "{{data}} {{csp}}"


def test_no_content_without_the_recording(rich_capture: Made) -> None:
    plain = build_page(rich_capture.out)
    assert SECRET_PROMPT not in plain
    assert '"bodies"' not in plain
    with_bodies = build_page(rich_capture.out, record=rich_capture.record)
    assert SECRET_PROMPT in with_bodies


def test_bodies_belong_to_their_turns(rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    html = build_page(rich_capture.out, record=rich_capture.record)
    data = page_data(html)
    blobs = orjson.loads(
        re.search(
            r'<script type="application/json" id="modeltap-bodies">(.*?)</script>', html, re.DOTALL
        ).group(1)  # type: ignore[union-attr]
    )
    for s in data["sessions"]:
        for turn in s["turns"]:
            bodies = turn["bodies"]
            assert bodies is not None, (s["id"], turn["index"])
            request = blobs[bodies["request"]]
            # The recorded request is the audited one: the very bytes, hashed.
            assert (
                hashlib.sha256(request["text"].encode()).hexdigest()
                == (turn["record"]["body_sha256"])
            )
    assert data["bodies"]["turns_with_bodies"] == sum(
        len(s.turns) for s in capture.sessions.values()
    )
    retry = session(data, "agent-1")["turns"]
    assert retry[1]["bodies"]["status"] == 429 and retry[2]["bodies"]["status"] == 200


def test_bodies_are_cut_at_the_limit(rich_capture: Made) -> None:
    html = build_page(rich_capture.out, record=rich_capture.record, body_limit=64)
    blobs = orjson.loads(
        re.search(
            r'<script type="application/json" id="modeltap-bodies">(.*?)</script>', html, re.DOTALL
        ).group(1)  # type: ignore[union-attr]
    )
    assert blobs
    for blob in blobs.values():
        assert blob["shown"] <= 64
        assert blob["cut"] == (blob["bytes"] > 64)


# --------------------------------------------------------------------------
# The command


def test_view_command_writes_into_the_capture(
    rich_capture: Made, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "cap"
    shutil.copytree(rich_capture.out, out)
    assert cli_main(["view", str(out)]) == 0
    written = out / "view.html"
    turns = sum(len(s.turns) for s in Capture.load(out).sessions.values())
    assert page_data(written.read_text())["capture"]["turns"] == turns == 11
    assert f"wrote {written}" in capsys.readouterr().err


def test_view_command_output_options(rich_capture: Made, tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "page.html"
    assert cli_main(["view", str(rich_capture.out), "-o", str(target), "--title", "nightly"]) == 0
    assert page_data(target.read_text())["title"] == "nightly"
    capsys.readouterr()
    assert cli_main(["view", str(rich_capture.out), "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("<!doctype html>")


def test_view_command_errors_name_the_path(tmp_path: Path, capsys: Any) -> None:
    assert cli_main(["view", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert cli_main(["view", str(tmp_path)]) == 2
    assert "no audit.jsonl" in capsys.readouterr().err


def test_view_command_refuses_a_bad_recording(
    rich_capture: Made, tmp_path: Path, capsys: Any
) -> None:
    code = cli_main(["view", str(rich_capture.out), "--record", str(tmp_path), "-o", "-"])
    assert code == 2
    assert "recording.jsonl" in capsys.readouterr().err


def test_view_command_bad_body_limit(rich_capture: Made, capsys: Any) -> None:
    with pytest.raises(SystemExit):
        cli_main(["view", str(rich_capture.out), "--body-limit", "lots"])
    assert "256k" in capsys.readouterr().err
