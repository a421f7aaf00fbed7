"""``modeltap run --ui``: the page served live on the control listener.

The browser test runs the real command (``modeltap run --ui`` in a
subprocess), opens the one-time link it prints in Debian's Chromium, drives
the proxy with the openai SDK and waits for the page to show each exchange.
The authorisation tests talk HTTP to an in-process proxy's control listener.
"""

from __future__ import annotations

import http.client
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import orjson
import pytest

from modeltap.app.cli import serve_ui
from modeltap.app.control import end_session, endpoints
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream, chat_text_sse
from tests.view_browser import CHROMIUM, CHROMIUM_ARGS, PageWatch, require_browser, screenshot
from tests.view_captures import Running, chat_tool_reply, running_proxy

_UI_LINE = re.compile(r"ui +(http://\S+/ui\?code=\S+)")


def request(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request; headers of the answer lower-cased (Set-Cookie kept whole)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, target, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Running, str]]:
    with running_proxy(tmp_path / "out") as run:
        link = serve_ui(run.proxy)
        assert link is not None
        yield run, link


def _cookie(link: str) -> str:
    status, headers, _ = request(link)
    assert status == 303 and headers["location"] == "/ui"
    return headers["set-cookie"].split(";")[0]


def test_the_link_opens_once_and_sets_a_strict_cookie(live: tuple[Running, str]) -> None:
    _, link = live
    status, headers, _ = request(link)
    assert status == 303
    assert headers["location"] == "/ui"  # the code leaves the address bar
    cookie = headers["set-cookie"]
    attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert attributes == {"path=/ui", "httponly", "samesite=strict"}
    # Spent: the same link opens nothing again.
    status, _, body = request(link)
    assert status == 403 and b"used already" in body
    # A made-up code neither.
    status, _, _ = request(link.split("code=")[0] + "code=guess")
    assert status == 403


def test_the_page_and_its_data_need_the_cookie(live: tuple[Running, str]) -> None:
    run, link = live
    base = run.proxy.control_url
    for path in ("/ui", "/ui/data"):
        status, _, body = request(f"{base}{path}")
        assert status == 401 and b"one-time link" in body
        status, _, _ = request(f"{base}{path}", headers={"Cookie": "modeltap_ui=forged"})
        assert status == 401
    cookie = _cookie(link)
    status, headers, body = request(f"{base}/ui", headers={"Cookie": cookie})
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    policy = headers["content-security-policy"]
    assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "'unsafe-inline'" not in policy
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["cache-control"] == "no-store"
    assert b'id="modeltap-data"' in body


def test_the_cookie_cannot_end_a_session(live: tuple[Running, str]) -> None:
    """The page is for looking: its cookie is not the harness's token."""
    run, link = live
    client = run.openai("keep-me", retries=0)
    client.chat.completions.create(model="gpt-stub", messages=[{"role": "user", "content": "hi"}])
    cookie = _cookie(link)
    status, _, _ = request(
        f"{run.proxy.control_url}/sessions/keep-me/end", "POST", {"Cookie": cookie}
    )
    assert status == 401
    assert not (run.out / "sessions.jsonl").exists()


def test_a_page_from_another_host_name_is_refused(live: tuple[Running, str]) -> None:
    """DNS rebinding: a page of evil.test resolved to 127.0.0.1 sends Host: evil.test."""
    run, link = live
    port = urlsplit(run.proxy.control_url).port
    status, _, _ = request(link, headers={"Host": f"evil.test:{port}"})
    assert status == 421
    cookie = _cookie(link)
    status, _, _ = request(
        f"{run.proxy.control_url}/ui/data", headers={"Host": f"evil.test:{port}", "Cookie": cookie}
    )
    assert status == 421
    status, _, _ = request(
        f"{run.proxy.control_url}/ui/data", headers={"Host": f"localhost:{port}", "Cookie": cookie}
    )
    assert status == 200


def test_new_links_need_the_runs_token(live: tuple[Running, str]) -> None:
    run, _ = live
    base = run.proxy.control_url
    (endpoint,) = endpoints(run.out)
    status, _, _ = request(f"{base}/ui/links", "POST")
    assert status == 401
    status, _, body = request(
        f"{base}/ui/links", "POST", {"Authorization": f"Bearer {endpoint.token}"}
    )
    assert status == 201
    fresh = orjson.loads(body)["url"]
    assert fresh.startswith(f"{base}/ui?code=")
    assert request(fresh)[0] == 303


def test_data_changes_with_the_files_and_costs_a_304_otherwise(
    live: tuple[Running, str],
) -> None:
    run, link = live
    cookie = {"Cookie": _cookie(link)}
    url = f"{run.proxy.control_url}/ui/data"
    status, headers, body = request(url, headers=cookie)
    assert status == 200 and orjson.loads(body)["sessions"] == []  # nothing written yet
    etag = headers["etag"]
    status, _, body = request(url, headers={**cookie, "If-None-Match": etag})
    assert (status, body) == (304, b"")
    client = run.openai("live-1", retries=0)
    client.chat.completions.create(model="gpt-stub", messages=[{"role": "user", "content": "hi"}])
    status, headers, body = request(url, headers={**cookie, "If-None-Match": etag})
    assert status == 200 and headers["etag"] != etag
    data = orjson.loads(body)
    assert [s["id"] for s in data["sessions"]] == ["live-1"]
    assert data["live"] == {"data_url": "/ui/data", "poll_ms": 1000}


def test_the_proxy_port_never_serves_the_page(live: tuple[Running, str]) -> None:
    run, link = live
    code = link.split("code=")[1]
    for path in ("/ui", f"/ui?code={code}", "/ui/data"):
        status, _, body = request(f"{run.proxy.url}{path}")
        assert b"modeltap-data" not in body and status != 303, (path, status)
    # The link was not spent by the proxy port.
    assert request(link)[0] == 303


# --------------------------------------------------------------------------
# In a browser, through the real command


def _wait_for_link(p: ProxyProcess) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = _UI_LINE.search(p.stderr.decode(errors="replace"))
        if found:
            return found.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no ui line on the start-up screen: {p.stderr.decode()}")


def _evidence(tab: Any) -> dict[str, str]:
    """What the live page says of the evidence: at the top, in the session list,
    above the timeline and in the right pane (the session, no turn chosen)."""
    return {
        "capture": tab.inner_text("#capture-evidence"),
        "list": tab.inner_text("#sessions li[data-session=live-1] [data-role=evidence]"),
        "head": tab.inner_text("#session-head [data-role=evidence]"),
        "right": tab.inner_text("#detail [data-role=evidence]"),
    }


def test_run_ui_updates_as_exchanges_happen(upstream: Upstream, tmp_path: Path) -> None:
    require_browser()
    from playwright.sync_api import sync_playwright

    out = tmp_path / "out"
    p = ProxyProcess("--out", str(out), "--route", f"stub={upstream.url}", "--ui")
    try:
        link = _wait_for_link(p)
        origin = link.split("/ui?")[0]
        client = openai.OpenAI(
            base_url=f"{p.url}/stub/v1",
            api_key="k",
            max_retries=0,
            default_headers={"x-modeltap-session": "live-1"},
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                tab: Any = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
                watch = PageWatch(tab, allowed_origin=origin + "/ui")
                tab.goto(link)
                tab.wait_for_selector("html[data-ready=true]")
                assert tab.url == f"{origin}/ui"
                assert tab.locator("#sessions li[data-session]").count() == 0

                client.chat.completions.create(
                    model="gpt-stub", messages=[{"role": "user", "content": "one"}]
                )
                tab.wait_for_selector("#sessions li[data-session=live-1]", timeout=10_000)
                assert tab.inner_text(
                    "#sessions li[data-session=live-1] [data-role=stop-reason]"
                ) == ("running")
                # Running: what the page has seen is complete so far, and not final.
                assert _evidence(tab) == {
                    "capture": "evidence not final: 1 session running",
                    "list": "evidence not final",
                    "head": "evidence not final",
                    "right": "evidence not final",
                }
                assert "evidence complete" not in tab.inner_text("body")
                screenshot(tab, "live-running")
                client.chat.completions.create(
                    model="gpt-stub-2", messages=[{"role": "user", "content": "two"}]
                )
                tab.wait_for_selector("#rows .row[data-key=t2]", timeout=10_000)
                tab.click("#rows .row[data-key=t2]")
                assert tab.inner_text("#changes li") == "model changed: gpt-stub -> gpt-stub-2"
                assert tab.inner_text("#live").startswith("live · ")
                screenshot(tab, "live")
                watch.assert_clean()

                # A streamed answer held back: its turn is in flight, not incomplete.
                held = threading.Event()
                reply = chat_text_sse("gpt-stub-2")
                reply.gate_after = {0: held}
                upstream.replies.append(reply)

                def third() -> None:
                    stream = client.chat.completions.create(
                        model="gpt-stub-2",
                        messages=[{"role": "user", "content": "three"}],
                        stream=True,
                    )
                    for _ in stream:
                        pass

                asking = threading.Thread(target=third)
                asking.start()
                try:
                    tab.wait_for_selector("#rows .row[data-key=t3]", timeout=10_000)
                    flying = "#rows .row[data-key=t3] .badge:text-is('in flight')"
                    assert tab.locator(flying).count() == 1
                    tab.keyboard.press("Escape")
                    assert _evidence(tab)["list"] == "evidence not final"
                    assert _evidence(tab)["capture"] == "evidence not final: 1 session running"
                    tab.click("#rows .row[data-key=t3]")
                    assert tab.inner_text("#detail [data-role=evidence]") == "in flight"
                    assert tab.inner_text("#response").startswith("in flight: the answer")
                    assert "evidence incomplete" not in tab.inner_text("body")
                    assert tab.locator("#rows .badge:text-is('incomplete')").count() == 0
                    screenshot(tab, "live-in-flight")
                finally:
                    held.set()
                    asking.join(timeout=10)
                tab.wait_for_selector(
                    "#detail [data-role=evidence]:text-is('evidence complete')", timeout=10_000
                )
                assert tab.locator(flying).count() == 0

                # The model asks for a tool: until a request carries its result, the
                # agent may be running it; not final, not incomplete.
                upstream.replies.append(chat_tool_reply("gpt-stub-2", "lookup", "{}", "call_l1"))
                lookup = [{"type": "function", "function": {"name": "lookup"}}]
                asked = [{"role": "user", "content": "four"}]
                call = (
                    client.chat.completions.create(model="gpt-stub-2", messages=asked, tools=lookup)
                    .choices[0]
                    .message
                )
                tab.wait_for_selector("#rows .row[data-key=t4] .tools", timeout=10_000)
                tab.keyboard.press("Escape")
                assert _evidence(tab)["list"] == "evidence not final"
                assert _evidence(tab)["capture"] == "evidence not final: 1 session running"
                assert tab.locator("#rows .badge:text-is('incomplete')").count() == 0
                tab.click("#rows .row[data-key=t4]")
                assert tab.inner_text("#detail [data-role=evidence]") == "evidence not final"
                assert tab.inner_text("#tool-calls [data-role=result]") == (
                    "no result yet (the session is still running)"
                )
                assert "evidence incomplete" not in tab.inner_text("body")
                screenshot(tab, "live-awaiting-result")
                client.chat.completions.create(
                    model="gpt-stub-2",
                    messages=[
                        *asked,
                        call.model_dump(exclude_none=True),  # type: ignore[list-item]
                        {"role": "tool", "tool_call_id": "call_l1", "content": "ok"},
                    ],
                    tools=lookup,
                )
                tab.wait_for_selector("#rows .row[data-key=t5]", timeout=10_000)
                assert tab.inner_text("#detail [data-role=evidence]") == "evidence complete"
                assert tab.inner_text("#tool-calls [data-role=result]").startswith(
                    "result sent back in turn 5"
                )

                # The harness ends the session: the page says so, and the evidence is final.
                end_session(out, "live-1")
                tab.wait_for_selector(
                    "#sessions li[data-session=live-1] "
                    "[data-role=stop-reason]:text-is('completed')",
                    timeout=10_000,
                )
                tab.keyboard.press("Escape")
                assert _evidence(tab) == {
                    "capture": "evidence complete",
                    "list": "evidence complete",
                    "head": "evidence complete",
                    "right": "evidence complete",
                }
                assert "not final" not in tab.inner_text("body")
                screenshot(tab, "live-ended")
                watch.assert_clean()

                assert p.stop(signal.SIGINT) == 0
                tab.wait_for_function(
                    "() => document.getElementById('live').textContent.includes('disconnected')",
                    timeout=10_000,
                )
                # The failed polls of a stopped proxy are the page's news, not its errors.
                watch.errors = [e for e in watch.errors if "Failed to fetch" not in e]
                watch.errors = [e for e in watch.errors if "ERR_CONNECTION_REFUSED" not in e]
                assert watch.errors == []
            finally:
                browser.close()
    finally:
        p.kill()
    assert "ui         http://127.0.0.1:" in p.stderr.decode()
