"""The page of ``modeltap view`` in a real headless Chromium.

Real captures (the proxy driven by the openai and anthropic SDKs, see
``view_captures``), real page files, Debian's Chromium driven by Playwright
(see ``view_browser`` for why and how). Every test reads what the page shows
from the DOM and compares it with what :class:`~modeltap.evidence.capture.Capture`
reads from the same files, and fails on any console error, uncaught error,
dialog or network request. Screenshots go to ``test-artifacts/view/``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modeltap.evidence.capture import Capture
from modeltap.report.view import build_page, build_view_data, render_page
from tests.view_browser import CHROMIUM, CHROMIUM_ARGS, PageWatch, require_browser, screenshot
from tests.view_captures import (
    INJECT_ARGUMENTS,
    INJECT_CALL_ID,
    INJECT_CALLED,
    INJECT_MODEL,
    INJECT_SESSION,
    INJECT_TOOL,
    SECRET_PROMPT,
    TOOL_ARGUMENTS,
    WEATHER_MODEL,
    Made,
    make_long_capture,
    make_weather_capture,
    rich_capture,
)

__all__ = ["rich_capture"]  # the fixture, used by name

VIEWPORT = {"width": 1500, "height": 900}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Page:
    """One page file open in a fresh browser context, watched."""

    def __init__(self, browser: Any, path: Path, hash_: str = "") -> None:
        self.context = browser.new_context(viewport=VIEWPORT)
        self.tab = self.context.new_page()
        self.watch = PageWatch(self.tab)
        self.tab.goto(path.as_uri() + hash_)
        self.tab.wait_for_selector("html[data-ready=true]")

    def text(self, selector: str) -> str:
        return str(self.tab.inner_text(selector)).strip()

    def texts(self, selector: str) -> list[str]:
        return [str(t).strip() for t in self.tab.locator(selector).all_inner_texts()]

    def session(self, sid: str) -> None:
        self.tab.evaluate(
            "(sid) => [...document.querySelectorAll('#sessions li')]"
            ".find(li => li.dataset.session === sid).click()",
            sid,
        )
        assert self.text("#session-id") == sid

    def row(self, key: str) -> None:
        self.tab.click(f"#rows .row[data-key={key}]")

    def field(self, section: str, name: str) -> str:
        return self.text(f"{section} dd[data-field={name}]")

    def close(self) -> None:
        self.watch.assert_clean()
        self.context.close()


@pytest.fixture(scope="module")
def rich_page_file(rich_capture: Made, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("view-page") / "view.html"
    path.write_text(build_page(rich_capture.out), encoding="utf-8")
    return path


@pytest.fixture
def page(browser: Any, rich_page_file: Path) -> Iterator[Page]:
    opened = Page(browser, rich_page_file)
    yield opened
    opened.close()


def ms_text(ms: float | None) -> str | None:
    """The page's own duration format (page.js msText), as the test's oracle."""
    if ms is None:
        return None
    a = abs(ms)
    if a < 10:
        return f"{ms:.1f} ms"
    if a < 1000:
        return f"{round(ms)} ms"
    if a < 60000:
        return f"{ms / 1000:.{2 if a < 10000 else 1}f} s"
    return f"{ms / 60000:.1f} min"


# --------------------------------------------------------------------------
# Sessions, status, coverage


def test_sessions_show_status_and_coverage(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    listed = page.tab.evaluate(
        """() => [...document.querySelectorAll('#sessions li')].map(li => ({
            id: li.dataset.session,
            stop: li.querySelector('[data-role=stop-reason]').textContent,
            evidence: li.querySelector('[data-role=evidence]').textContent,
            turns: li.querySelector('[data-role=turns]').textContent}))"""
    )
    assert [s["id"] for s in listed] == list(capture.sessions)
    for item in listed:
        s = capture.sessions[item["id"]]
        assert item["stop"] == (s.stop_reason or "not ended")
        assert item["evidence"] == (
            "evidence complete" if s.evidence_complete else "evidence incomplete"
        )
        assert item["turns"] == f"{len(s.turns)} turn{'' if len(s.turns) == 1 else 's'}"
    assert page.text("#capture-evidence") == "evidence incomplete"

    for sid in ("broken-1", "idle-1", "agent-1"):
        page.session(sid)
        s = capture.sessions[sid]
        chips = page.tab.evaluate(
            """() => Object.fromEntries(
                [...document.querySelectorAll('#session-coverage-channels span')]
                .map(e => [e.dataset.channel, e.dataset.status]))"""
        )
        assert chips == {n: s.coverage.channel(n).status for n in chips}
        assert len(chips) == 6
        reasons = page.tab.evaluate(
            """() => [...document.querySelectorAll('#session-coverage-reasons li')].map(
                li => [li.dataset.channel, li.textContent])"""
        )
        expected = [
            [n, f"{n} {r}"]
            for n in ("events", "actions", "messages", "usage", "status", "data")
            for r in s.coverage.channel(n).reasons
        ]
        assert reasons == expected
    page.session("broken-1")
    assert page.text("#session-head [data-role=stop-reason]") == "upstream_error"
    screenshot(page.tab, "sessions-broken")


# --------------------------------------------------------------------------
# The timeline


def test_timeline_bars_show_first_chunk_and_duration(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    page.session("claude-1")
    turns = capture.sessions["claude-1"].turns
    assert page.tab.locator("#rows .row").count() == len(turns)
    for turn in turns:
        assert turn.response is not None
        ttft, duration = turn.response.ttft_ms, turn.response.duration_ms
        assert ttft is not None and duration is not None and 0 < ttft < duration
        page.row(f"t{turn.number}")
        assert page.field("#detail", "ttft_ms") == ms_text(ttft)
        assert page.field("#detail", "duration_ms") == ms_text(duration)
        assert page.field("#detail", "ttfb_ms") == ms_text(turn.response.ttfb_ms)
        row = f"#rows .row[data-key=t{turn.number}]"
        assert page.text(f"{row} .dur") == ms_text(duration)
        # The bar: waiting until the first chunk, then output, in proportion.
        wait, stream = page.tab.evaluate(
            """(row) => ['wait', 'stream'].map(c => parseFloat(
                document.querySelector(row + ' .seg.' + c).style.width))""",
            row,
        )
        assert wait / (wait + stream) == pytest.approx(ttft / duration, rel=1e-3)
    screenshot(page.tab, "timeline-claude")


def test_tool_execution_gaps_between_model_calls(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    page.session("agent-1")
    invocation = capture.sessions["agent-1"].turns[0].tool_invocations[0]
    assert invocation.duration_ms is not None
    gap = page.text("#rows .row[data-key=t1] .gap .gl")
    assert gap == f"lookup {ms_text(invocation.duration_ms)}"
    page.row("t1")
    assert page.texts("#tool-calls .call .name") == ["lookup"]
    assert page.text("#tool-calls [data-role=arguments]") == json.dumps(
        json.loads(TOOL_ARGUMENTS), indent=2
    )
    assert page.text("#tool-calls [data-role=result]") == (
        f"result sent back in turn 2 · {invocation.result_bytes} B · after "
        f"{ms_text(invocation.duration_ms)}"
    )


def test_retries_are_grouped_in_the_timeline(page: Page, rich_capture: Made) -> None:
    page.session("agent-1")
    assert page.tab.get_attribute("#rows .row[data-key=t3]", "class") == "row turn retry"
    assert page.text("#rows .row[data-key=t3] .badge.retry") == "retry"
    assert page.text("#rows .row[data-key=t2] .badge.retry") == "\u00d72"  # x2
    assert page.text("#rows .row[data-key=t2] .badge.bad") == "429"
    # The 429 reported no usage: the total is unknown; what the others reported is
    # shown beside it as what it is, never as the total.
    capture = Capture.load(rich_capture.out)
    turns = capture.sessions["agent-1"].turns
    known = sum(t.usage.input_tokens or 0 for t in turns)
    assert capture.sessions["agent-1"].usage.input_tokens is None
    assert page.text("#session-usage [data-usage=input_tokens]") == (
        f"input unknown ({known:,} in 3 of 4 turns)"
    )
    page.row("t3")
    assert page.text("#retry-badge") == "retry of turn 2"
    assert page.text("#changes").startswith("A retry: the same request body as turn 2")
    page.row("t2")
    assert page.text("#retry-badge") == "2 attempts (retried by the client)"
    assert page.texts("#errors li") == ["upstream answered HTTP 429"]


def test_refusals_and_errors_are_marked(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    page.session("ended-1")
    refusal = capture.sessions["ended-1"].refusals[0]
    assert page.text("#rows .row.refusal .model") == "session_ended"
    assert page.tab.locator("#rows .row.refusal .mark.refused").count() == 1
    page.tab.click("#rows .row.refusal")
    assert page.text("#detail-title") == "Refused: session_ended"
    assert page.field("#detail", "message") == refusal.message

    page.session("broken-1")
    turn = capture.sessions["broken-1"].turns[0]
    assert page.text("#rows .row[data-key=t1] .badge.bad") == "error"
    assert page.tab.locator("#rows .row[data-key=t1] .seg.bad").count() == 1
    page.row("t1")
    assert page.texts("#errors li") == turn.errors
    assert turn.response is not None
    assert page.field("#response", "status") == "no answer"
    assert page.field("#response", "evidence_complete") == "false"
    assert page.field("#response", "capture_errors") == "; ".join(turn.response.capture_errors)


def test_websocket_session_with_a_refused_message(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    s = capture.sessions["codex-ws"]
    page.session("codex-ws")
    # In time order: a turn, the refused continuation, the next turn.
    assert page.tab.evaluate(
        "() => [...document.querySelectorAll('#rows .row')].map(r => r.dataset.key)"
    ) == ["t1", "r0", "t2"]
    assert page.text("#rows .row[data-key=r0] .model") == "ws_implicit_continuation"
    assert page.text("#session-head [data-role=stop-reason]") == s.stop_reason
    page.row("t2")
    assert page.texts("#changes li") == [
        "effort changed: medium -> high",
        "hosted tools removed: web_search",
    ]
    assert page.field("#response", "status") == "none (a WebSocket message)"
    assert page.field("#audit", "transport") == "websocket"


# --------------------------------------------------------------------------
# What changed, audit facts, usage


def test_what_changed_from_the_previous_turn(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    records = [t.record for t in capture.sessions["agent-1"].turns]
    page.session("agent-1")
    page.row("t1")
    assert page.text("#changes") == "First turn of the session."
    page.row("t2")
    changes = page.tab.evaluate(
        """() => [...document.querySelectorAll('#changes li')].map(
            li => [li.dataset.what, li.dataset.kind, li.textContent])"""
    )
    assert (
        changes
        == [
            ["reasoning_effort", "changed", "effort changed: not sent -> low"],
            ["tools", "added", "tools added: get_time"],
            [
                "instructions",
                "changed",
                f"instructions hash changed: {records[0].instructions_sha256[:12]} -> "  # type: ignore[index]
                f"{records[1].instructions_sha256[:12]}",  # type: ignore[index]
            ],
            ["instructions_parts", "changed", "instruction parts changed: #1 of 1"],
        ]
    )
    assert page.tab.locator("#rows .row[data-key=t2] .badge.change").count() == 1
    page.row("t4")
    assert page.texts("#changes li") == [
        "model changed: gpt-stub -> gpt-stub-mini",
        "tools removed: lookup",
    ]
    screenshot(page.tab, "what-changed")


def test_audit_facts_usage_and_unknowns(page: Page, rich_capture: Made) -> None:
    capture = Capture.load(rich_capture.out)
    page.session("claude-1")
    page.row("t1")
    record = capture.sessions["claude-1"].turns[0].record
    assert page.field("#audit", "model") == record.model
    assert page.field("#audit", "thinking") == '{"type":"enabled","budget_tokens":1024}'
    assert page.field("#audit", "instructions_sha256") == record.instructions_sha256
    assert page.field("#audit", "tool_names") == "lookup"
    assert page.field("#audit", "seq") == str(record.seq)
    assert page.field("#audit", "request_id") == record.request_id
    assert page.field("#audit", "api") == "anthropic.messages"
    assert page.field("#audit", "reasoning_effort") == "not sent"
    usage = capture.sessions["claude-1"].turns[0].usage
    shown = page.tab.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#usage tr')].map(
            tr => [tr.dataset.usage, tr.lastChild.textContent]))"""
    )
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        value = getattr(usage, name)
        assert value is not None
        assert shown[name] == f"{value:,}"
    # Anthropic reports no total: the page shows the sum of its reported counts,
    # and says so; it reports no reasoning count either: unknown, never 0.
    assert usage.total_tokens is None  # the record keeps the provider's own numbers
    parts = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    total = sum(getattr(usage, name) for name in parts)
    assert shown["total_tokens"] == (
        f"{total:,} (sum of the reported counts: the provider reports no total)"
    )
    assert shown["reasoning_tokens"] == "unknown"
    # The stand-in model is not in the price table: its estimate is unknown, never $0.
    cost = capture.sessions["claude-1"].turns[0].cost
    assert cost is not None and cost.estimate_usd is None
    assert shown["cost"] == "unknown"


def test_cost_estimates_when_the_capture_has_them(
    browser: Any, rich_capture: Made, tmp_path: Path
) -> None:
    """The cost estimate (issue 18) shows as an estimate; null is unknown, never 0."""
    data = build_view_data(Capture.load(rich_capture.out))
    agent = next(s for s in data["sessions"] if s["id"] == "agent-1")

    def cost(usd: float | None) -> dict[str, Any]:
        # The shape records.Cost is written in (events.jsonl, Capture).
        return {
            "estimate_usd": usd,
            "source": "genai-prices 0.2.3",
            "priced_as": None,
            "note": None,
        }

    agent["cost"] = cost(0.00123)
    agent["turns"][0]["cost"] = cost(0.0009)
    agent["turns"][1]["cost"] = cost(None)
    agent["turns"][2]["cost"] = cost(0.0)
    path = tmp_path / "cost.html"
    path.write_text(render_page(data), encoding="utf-8")
    opened = Page(browser, path, "#s=agent-1&r=t1")
    try:
        assert opened.text("#session-head [data-role=cost] b") == "$0.00123 (estimate)"
        assert opened.text("#usage tr[data-usage=cost] td:last-child") == "$0.000900 (estimate)"
        opened.row("t2")
        assert opened.text("#usage tr[data-usage=cost] td:last-child") == "unknown"
        opened.row("t3")
        assert opened.text("#usage tr[data-usage=cost] td:last-child") == "$0 (estimate)"
    finally:
        opened.close()


# --------------------------------------------------------------------------
# Search and filter


def test_filter_by_model_tool_session_and_problems(page: Page) -> None:
    def sessions() -> list[str]:
        return page.tab.evaluate(
            "() => [...document.querySelectorAll('#sessions li[data-session]')]"
            ".map(li => li.dataset.session)"
        )

    def rows() -> list[str]:
        return page.tab.evaluate(
            "() => [...document.querySelectorAll('#rows .row')].map(r => r.dataset.key)"
        )

    page.tab.select_option("#filter-model", "claude-stub")
    assert sessions() == ["claude-1"]
    assert page.text("#session-id") == "claude-1"
    assert rows() == ["t1", "t2"]
    page.tab.select_option("#filter-model", "")

    page.tab.select_option("#filter-tool", "c:get_time")
    assert sessions() == ["agent-1"]
    assert rows() == ["t3"]
    page.tab.select_option("#filter-tool", "a:get_time")
    assert rows() == ["t2", "t3", "t4"]
    page.tab.select_option("#filter-tool", "")

    page.tab.fill("#q", "broken")
    assert sessions() == ["broken-1"]
    page.tab.fill("#q", "gpt-stub-mini")
    assert sessions() == ["agent-1"] and rows() == ["t4"]
    page.tab.fill("#q", "")

    page.tab.check("#filter-problems")
    assert set(sessions()) == {"agent-1", "ended-1", "broken-1", "codex-ws", INJECT_SESSION}
    page.session("ended-1")
    assert rows() == ["r0"]
    page.tab.uncheck("#filter-problems")
    page.tab.check("#filter-changed")
    page.session("agent-1")
    assert rows() == ["t2", "t4"]
    screenshot(page.tab, "filtered")


def test_keyboard_and_link_to_a_turn(browser: Any, rich_page_file: Path) -> None:
    opened = Page(browser, rich_page_file, "#s=claude-1&r=t2")
    try:
        assert opened.text("#session-id") == "claude-1"
        assert opened.text("#detail-title").startswith("Turn 2 ·")
        opened.tab.keyboard.press("k")
        assert opened.text("#detail-title").startswith("Turn 1 ·")
        assert opened.tab.evaluate("() => location.hash") == "#s=claude-1&r=t1"
        opened.tab.keyboard.press("/")
        assert opened.tab.evaluate("() => document.activeElement.id") == "q"
    finally:
        opened.close()


# --------------------------------------------------------------------------
# Injection


def test_agent_controlled_strings_are_shown_as_text(page: Page) -> None:
    page.session(INJECT_SESSION)
    page.row("t1")
    # One model for the whole session: said once, above the labels.
    assert page.text("#timeline-labels") == f"turn · {INJECT_MODEL} · tools called"
    assert page.field("#audit", "model") == INJECT_MODEL
    assert page.field("#audit", "tool_names") == INJECT_TOOL
    assert page.texts("#tool-calls .call .name") == [INJECT_CALLED]
    assert page.texts("#tool-calls .call .cid") == [INJECT_CALL_ID]
    assert page.text("#tool-calls [data-role=arguments]") == json.dumps(
        json.loads(INJECT_ARGUMENTS), indent=2
    )
    # Hover and click everything an injected handler could hang on.
    for selector in ("#rows .row", "#tool-calls .call", "#sessions li", "#detail dd"):
        for handle in page.tab.query_selector_all(selector):
            handle.hover()
    page.tab.select_option("#filter-tool", f"c:{INJECT_CALLED}")
    assert page.text("#session-id") == INJECT_SESSION
    # No element came from a string: no image, no SVG, no handler attribute, one script.
    assert page.tab.evaluate(
        """() => [document.querySelectorAll('img, svg, iframe, object').length,
            [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(
                a => a.name.startsWith('on'))).length,
            document.querySelectorAll('script:not([type])').length]"""
    ) == [0, 0, 1]
    screenshot(page.tab, "injection")
    # PageWatch.assert_clean (at close) checks window.__pwned, dialogs, requests.


# --------------------------------------------------------------------------
# Content only with the recording


def test_bodies_show_only_with_the_recording(
    browser: Any, rich_capture: Made, tmp_path: Path
) -> None:
    path = tmp_path / "with-bodies.html"
    path.write_text(build_page(rich_capture.out, record=rich_capture.record), encoding="utf-8")
    opened = Page(browser, path, "#s=agent-1&r=t1")
    try:
        assert opened.text("#content-shown").startswith("content shown: bodies from")
        opened.tab.click("#bodies button:has-text('request body')")
        request = opened.text("#bodies [data-role=request-body]")
        assert SECRET_PROMPT in request
        assert json.loads(request)["model"] == "gpt-stub"
        opened.tab.click("#bodies button:has-text('response body')")
        assert json.loads(opened.text("#bodies [data-role=response-body]"))["id"] == (
            "chatcmpl-call_lookup1"
        )
        opened.session("claude-1")
        opened.row("t1")
        opened.tab.click("#bodies button:has-text('response body')")
        assert opened.text("#bodies [data-role=response-body]").startswith("event: message_start")
        screenshot(opened.tab, "bodies")
        opened.session("codex-ws")
        opened.row("t2")
        opened.tab.click("#bodies button:has-text('request body')")
        request = json.loads(opened.text("#bodies [data-role=request-body]"))
        assert request["reasoning"] == {"effort": "high"}
        opened.tab.click("#bodies button:has-text('WebSocket messages')")
        events = [json.loads(t)["type"] for t in opened.texts("#bodies [data-role=ws-message]")]
        assert events == ["response.created", "response.output_text.delta", "response.completed"]
    finally:
        opened.close()


def test_no_bodies_section_without_the_recording(page: Page) -> None:
    page.session("agent-1")
    page.row("t1")
    assert page.tab.locator("#bodies").count() == 0
    assert page.tab.locator("#content-shown").count() == 0


# --------------------------------------------------------------------------
# Load errors and empty captures


def test_unreadable_lines_are_shown(browser: Any, rich_capture: Made, tmp_path: Path) -> None:
    out = tmp_path / "torn"
    shutil.copytree(rich_capture.out, out)
    with (out / "audit.jsonl").open("ab") as f:
        f.write(b'{"request_id": "torn')
    (error,) = Capture.load(out).load_errors
    path = tmp_path / "torn.html"
    path.write_text(build_page(out), encoding="utf-8")
    opened = Page(browser, path)
    try:
        assert opened.text("#load-errors") == f"1 line could not be read: {error}"
        assert error.file == "audit.jsonl" and "torn write" in error.message
        assert opened.text("#capture-evidence") == "evidence incomplete"
    finally:
        opened.close()


# --------------------------------------------------------------------------
# A big capture


@pytest.fixture(scope="module")
def long_page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("view-long")
    out = make_long_capture(root / "out", 2000)
    path = root / "view.html"
    path.write_text(build_page(out), encoding="utf-8")
    return path


def test_two_thousand_turns_stay_virtual(browser: Any, long_page_file: Path) -> None:
    opened = Page(browser, long_page_file)
    try:
        tab = opened.tab
        assert tab.locator("#session-head b").first.inner_text() == "2000"
        # The timeline keeps most of the screen, whatever the session's reasons say.
        assert tab.evaluate("() => document.getElementById('timeline').clientHeight") > 400
        rendered = tab.locator("#rows .row").count()
        assert 0 < rendered < 100, rendered
        height = tab.evaluate("() => document.getElementById('rows').style.height")
        assert height == f"{2000 * 26}px"
        tab.evaluate(
            "() => { const t = document.getElementById('timeline'); t.scrollTop = t.scrollHeight; }"
        )
        tab.wait_for_selector("#rows .row[data-key=t2000]")
        assert tab.locator("#rows .row").count() < 100
        tab.click("#rows .row[data-key=t1999]")
        assert opened.text("#detail-title").startswith("Turn 1999 ·")
        tab.keyboard.press("j")
        assert opened.text("#detail-title").startswith("Turn 2000 ·")
        screenshot(tab, "two-thousand-turns")
    finally:
        opened.close()


@pytest.mark.parametrize("width", [1000, 640])
def test_narrow_windows_keep_the_timeline_usable(
    browser: Any, rich_page_file: Path, width: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 800})
    tab = context.new_page()
    watch = PageWatch(tab)
    try:
        tab.goto(rich_page_file.as_uri() + "#s=agent-1")
        tab.wait_for_selector("html[data-ready=true]")
        assert tab.evaluate("() => document.getElementById('timeline').clientHeight") > 300
        tab.click("#rows .row[data-key=t4]")
        assert tab.inner_text("#detail-title").startswith("Turn 4 ·")
        screenshot(tab, f"narrow-{width}")
        watch.assert_clean()
    finally:
        context.close()


# --------------------------------------------------------------------------
# Cases beside their sessions (modeltap view --expect)

VIEW_CASES = """
[[case]]
name = "agent looks up"
session = "agent-1"
expect_tools = ["lookup", "get_time"]

[[case]]
name = "claude answers"
session = "claude-1"
expect_text = "this text was never said"
forbid_tools = ["delete_account"]

[[case]]
name = "nobody asks the time"
forbid_tools = ["get_time"]
max_tool_calls = 100
optional = ["max_tool_calls"]
"""


def test_cases_show_their_verdicts_beside_each_session(
    browser: Any, rich_capture: Made, tmp_path: Path
) -> None:
    from modeltap.evidence.verdicts.cases import parse_cases
    from modeltap.report.case_report import judge

    cases_file = tmp_path / "cases.toml"
    cases_file.write_text(VIEW_CASES)
    path = tmp_path / "view.html"
    path.write_text(
        build_page(rich_capture.out, record=rich_capture.record, expect=cases_file),
        encoding="utf-8",
    )
    capture = Capture.load(rich_capture.out, record=rich_capture.record)
    oracle = {j.case.name: j for j in judge(parse_cases(VIEW_CASES), capture)}
    opened = Page(browser, path)
    try:
        for sid, names in (
            ("agent-1", ["agent looks up", "nobody asks the time"]),
            ("claude-1", ["claude answers", "nobody asks the time"]),
            ("idle-1", ["nobody asks the time"]),
        ):
            opened.session(sid)
            shown = opened.tab.evaluate(
                """() => [...document.querySelectorAll('#session-cases .case')].map(c => ({
                    name: c.querySelector('summary b').textContent,
                    status: c.dataset.status,
                    mark: c.querySelector('summary .vmark').textContent,
                    verdicts: [...c.querySelectorAll('.verdicts li')].map(li => ({
                        status: li.dataset.status, optional: li.dataset.optional,
                        name: li.querySelector('code').textContent,
                        text: li.textContent}))}))"""
            )
            assert [c["name"] for c in shown] == names
            for case in shown:
                judged = oracle[case["name"]].verdicts
                assert case["status"] == judged.status
                assert case["mark"] == {"passed": "[PASS]", "failed": "[FAIL]"}.get(
                    judged.status, "[UNAVAILABLE]"
                )
                assert [(v["name"], v["status"]) for v in case["verdicts"]] == [
                    (v.name, v.status) for v in judged
                ]
                for item, verdict in zip(case["verdicts"], judged, strict=True):
                    assert (verdict.reason or "") in item["text"]
                    assert item["optional"] == ("true" if verdict.is_optional else "false")
        statuses = {name: j.verdicts.status for name, j in oracle.items()}
        assert statuses == {
            "agent looks up": "passed",
            "claude answers": "failed",  # the recorded final text says otherwise
            "nobody asks the time": "failed",  # agent-1 asked for get_time
        }
        assert opened.text("#cases-summary") == "cases: 1/3 passed, 2 failed, 0 unavailable"
        opened.session("agent-1")
        screenshot(opened.tab, "cases")
    finally:
        opened.close()


# --------------------------------------------------------------------------
# As a first user opens it (issue 28): a three-second agent session, 1400x900


@pytest.fixture(scope="module")
def weather_page_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("view-weather")
    out = make_weather_capture(root / "out")
    path = root / "view.html"
    path.write_text(build_page(out), encoding="utf-8")
    return out, path


#: What the page lays out, read in the page: how far the page and the timeline
#: scroll sideways, and every label of the timeline that shows less than its text.
LAYOUT = """() => {
    const tl = document.getElementById('timeline');
    const wider = e => e.scrollWidth - e.clientWidth;
    const cut = sel => [...document.querySelectorAll(sel)].filter(e => wider(e) > 0)
        .map(e => e.textContent);
    const right = tl.getBoundingClientRect().right;
    return {
        page: wider(document.scrollingElement), timeline: wider(tl),
        past: [...tl.querySelectorAll('.tick, .gl, .seg')].filter(
            e => e.getBoundingClientRect().right > right + 0.5).map(e => e.textContent),
        cut: cut('#rows .row .lab > span').concat(cut('#rows .gl'), cut('#timeline-labels')),
        tools: [...document.querySelectorAll('#rows .row')].map(r => [r.dataset.key,
            (r.querySelector('.tools') || {}).textContent || null]),
        gaps: [...document.querySelectorAll('#rows .gl')].map(e => e.textContent),
        lab: document.querySelector('#rows .row .lab').getBoundingClientRect().width,
        lane: document.querySelector('#rows .row .lane').getBoundingClientRect().width};
}"""


@pytest.mark.parametrize(
    ("width", "height"), [(1400, 900), (1024, 768), (1920, 1080)], ids=["1400", "1024", "1920"]
)
def test_a_three_second_session_fits_with_its_tool_names_whole(
    browser: Any, weather_page_file: tuple[Path, Path], width: int, height: int
) -> None:
    out, path = weather_page_file
    capture = Capture.load(out)
    session = capture.sessions["weather-1"]
    (drawn,) = build_view_data(capture)["sessions"]
    assert drawn["stop"] - drawn["start"] >= 3000  # ms: the agent's own sleeps and pauses
    context = browser.new_context(viewport={"width": width, "height": height})
    tab = context.new_page()
    watch = PageWatch(tab)
    try:
        tab.goto(path.as_uri())
        tab.wait_for_selector("html[data-ready=true]")
        shown = tab.evaluate(LAYOUT)
        screenshot(tab, f"weather-{width}")
        # No sideways scrolling, nothing past the timeline's right edge, no label cut.
        assert (shown["page"], shown["timeline"], shown["past"]) == (0, 0, [])
        assert shown["cut"] == []
        assert shown["tools"] == [
            [f"t{t.number}", f"→ {', '.join(i.name for i in t.tool_invocations)}"]
            if t.tool_invocations
            else [f"t{t.number}", None]
            for t in session.turns
        ]
        assert shown["tools"][1] == ["t2", "→ get_weather, get_local_time"]
        # The tool time after each asking turn: the names where they fit, the time always.
        gaps = [
            ms_text(t.tool_invocations[0].duration_ms) for t in session.turns if t.tool_invocations
        ]
        assert len(shown["gaps"]) == len(gaps) == 2
        for label, took in zip(shown["gaps"], gaps, strict=True):
            assert label.endswith(f"{took}"), (label, took)
        # The model, the same for every turn, is said once above the labels.
        assert tab.inner_text("#timeline-labels") == f"turn · {WEATHER_MODEL} · tools called"
        # The bars keep at least half of the timeline.
        assert shown["lane"] >= shown["lab"]
        watch.assert_clean()
    finally:
        context.close()


def test_the_session_shows_on_the_right_until_a_turn_is_chosen(
    browser: Any, weather_page_file: tuple[Path, Path]
) -> None:
    out, path = weather_page_file
    session = Capture.load(out).sessions["weather-1"]
    opened = Page(browser, path)
    opened.context.pages[0].set_viewport_size({"width": 1400, "height": 900})
    try:
        assert opened.text("#detail-title") == "Session weather-1"
        assert opened.field("#session-summary", "turns") == "3"
        assert opened.field("#session-summary", "models") == WEATHER_MODEL
        assert opened.field("#session-summary", "tool_calls") == "3"
        assert opened.field("#session-summary", "input_tokens") == f"{session.usage.input_tokens:,}"
        assert opened.field("#session-summary", "execution_time_ms") == ms_text(
            session.execution_time_ms
        )
        rows = opened.tab.evaluate(
            """() => [...document.querySelectorAll('#session-tools tr[data-tool]')].map(
                tr => [...tr.children].map(td => td.textContent))"""
        )
        times = {
            name: sorted(
                i.duration_ms
                for t in session.turns
                for i in t.tool_invocations
                if i.name == name and i.duration_ms is not None
            )
            for name in ("get_local_time", "get_weather")
        }
        assert rows == [
            ["get_local_time", "1", ms_text(times["get_local_time"][0])],
            [
                "get_weather",
                "2",
                f"{ms_text(times['get_weather'][0])} to {ms_text(times['get_weather'][1])}",
            ],
        ]
        screenshot(opened.tab, "weather-session-summary")
        opened.row("t2")
        assert opened.text("#detail-title").startswith("Turn 2 ·")
        opened.tab.keyboard.press("Escape")
        assert opened.text("#detail-title") == "Session weather-1"
        assert opened.tab.evaluate("() => location.hash") == "#s=weather-1"
    finally:
        opened.close()


def test_the_session_summary_links_its_problems(page: Page, rich_capture: Made) -> None:
    session = Capture.load(rich_capture.out).sessions["agent-1"]
    page.session("agent-1")
    assert page.text("#detail-title") == "Session agent-1"
    assert page.field("#session-summary", "turns") == f"{len(session.turns)} (1 retry)"
    problems = page.tab.evaluate(
        """() => [...document.querySelectorAll('#session-problems li')].map(
            li => [li.dataset.key, li.textContent])"""
    )
    (turn,) = [t for t in session.turns if t.errors]
    assert problems == [[f"t{turn.number}", f"turn {turn.number}: {turn.errors[0]}"]]
    page.tab.click("#session-problems li")
    assert page.text("#detail-title").startswith(f"Turn {turn.number} ·")
