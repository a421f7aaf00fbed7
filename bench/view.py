"""Measure the page of ``modeltap view`` on a big capture in headless Chromium.

One command, from the repository root with the project's venv (needs Debian's
``chromium`` and the ``playwright`` package, both installed by ``.ci/run``)::

    python bench/view.py                 # 2,000 turns, 5 rounds
    python bench/view.py --turns 500 --rounds 3

It makes a real capture first: one session of ``--turns`` turns, an agent loop
driven through the proxy with the openai SDK against the test stub (every
other answer asks for a tool), then writes the page with ``modeltap view``
and opens it from its file in a fresh headless Chromium each round. Reported,
as medians over rounds (max in brackets where it matters):

* build: time for ``modeltap view`` to read the capture and write the page;
* load: from navigation start to the page's ``modeltap-ready`` mark (the
  data parsed, sessions listed, the timeline and the first rows drawn);
* scroll: the timeline scrolled from the first turn to the last, one step per
  animation frame; the frame intervals (p50, p95, max), frames over 50 ms,
  and the most rows that were ever in the document (the list is virtual);
* select: a click on a turn until its details are drawn;
* filter: choosing a called tool in the tool filter until the list is redrawn.

Figures depend on the machine; docs/VIEW.md quotes one run and says where.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright
from tests.view_browser import CHROMIUM, CHROMIUM_ARGS, PageWatch
from tests.view_captures import make_long_capture

from modeltap.report.view import build_page

SCROLL = """
async (steps) => {
  const tl = document.getElementById('timeline');
  if (tl.clientHeight < 300) throw new Error('timeline only ' + tl.clientHeight + ' px tall');
  const total = tl.scrollHeight - tl.clientHeight;
  const frames = [];
  let maxRows = 0;
  let last = await new Promise(requestAnimationFrame);
  for (let i = 1; i <= steps; i++) {
    tl.scrollTop = Math.round(total * i / steps);
    const now = await new Promise(requestAnimationFrame);
    frames.push(now - last);
    last = now;
    maxRows = Math.max(maxRows, document.querySelectorAll('#rows .row').length);
  }
  const lastRow = document.querySelector('#rows .row:last-child .idx');
  return {frames, maxRows, last: lastRow ? lastRow.textContent : null};
}
"""

SELECT = """
() => {
  const rows = document.querySelectorAll('#rows .row');
  const row = rows[Math.floor(rows.length / 2)];
  const t0 = performance.now();
  row.click();
  const ok = !!document.getElementById('detail-title');
  return {ms: performance.now() - t0, ok};
}
"""

FILTER = """
(tool) => {
  const select = document.getElementById('filter-tool');
  const t0 = performance.now();
  select.value = 'c:' + tool;
  select.dispatchEvent(new Event('change'));
  const n = document.getElementById('match-count').textContent;
  const ms = performance.now() - t0;
  select.value = '';
  select.dispatchEvent(new Event('change'));
  return {ms, n};
}
"""


NAV = """
() => ({
  ready: performance.getEntriesByName('modeltap-ready')[0].startTime,
  nodes: document.getElementsByTagName('*').length,
  heap: performance.memory ? performance.memory.usedJSHeapSize : null,
})
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=240, help="scroll steps (one per frame)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="modeltap-view-bench-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        out = make_long_capture(root / "out", args.turns)
        made_s = time.perf_counter() - t0
        builds = []
        for _ in range(3):
            t0 = time.perf_counter()
            page = build_page(out)
            builds.append(time.perf_counter() - t0)
        html = root / "view.html"
        html.write_text(page, encoding="utf-8")

        rounds: list[dict[str, Any]] = []
        with sync_playwright() as pw:
            for _ in range(args.rounds):
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    tab = browser.new_page(viewport={"width": 1500, "height": 900})
                    watch = PageWatch(tab)
                    tab.goto(html.as_uri())
                    tab.wait_for_selector("html[data-ready=true]")
                    nav = tab.evaluate(NAV)
                    scroll = tab.evaluate(SCROLL, args.steps)
                    select = tab.evaluate(SELECT)
                    filt = tab.evaluate(FILTER, "tool_3")
                    watch.assert_clean()  # no console error, no request, no dialog
                    rounds.append({**nav, **scroll, "select": select, "filter": filt})
                finally:
                    browser.close()

    frames = [f for r in rounds for f in r["frames"]]
    med = statistics.median
    print(
        f"capture: {args.turns} turns made through the proxy in {made_s:.1f} s; "
        f"page {len(page.encode()) / 1e6:.1f} MB"
    )
    print(f"chromium: {CHROMIUM}; {args.rounds} rounds, {args.steps} scroll steps each")
    print("| what | figure |")
    print("|---|---|")
    print(f"| build (`modeltap view`) | {med(builds) * 1000:.0f} ms |")
    print(
        f"| load to ready | {med(r['ready'] for r in rounds):.0f} ms "
        f"(max {max(r['ready'] for r in rounds):.0f}) |"
    )
    print(f"| elements in the page after load | {med(r['nodes'] for r in rounds):.0f} |")
    heaps = [r["heap"] for r in rounds if r["heap"]]
    if heaps:
        print(f"| JS heap after load | {med(heaps) / 1e6:.1f} MB |")
    print(
        f"| scroll frame interval p50 / p95 / max | {pct(frames, 50):.1f} / "
        f"{pct(frames, 95):.1f} / {max(frames):.1f} ms |"
    )
    print(f"| scroll frames over 50 ms | {sum(f > 50 for f in frames)} of {len(frames)} |")
    print(f"| most rows in the document while scrolling | {max(r['maxRows'] for r in rounds)} |")
    print(f"| last row reached | {rounds[-1]['last']} |")
    print(
        f"| select a turn (click to details drawn) | "
        f"{med(r['select']['ms'] for r in rounds):.1f} ms |"
    )
    print(
        f"| filter by a called tool (choice to redrawn) | "
        f"{med(r['filter']['ms'] for r in rounds):.1f} ms ({rounds[-1]['filter']['n']}) |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
