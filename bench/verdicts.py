"""Measure judging a case file over a big capture (``modeltap check --expect``).

One command, from the repository root with the project's venv::

    python bench/verdicts.py                      # 2,000 turns, 100 cases, 5 rounds
    python bench/verdicts.py --turns 500 --cases 20 --rounds 3

It makes a real capture first: one session of ``--turns`` turns, an agent
loop driven through the proxy with the openai SDK against the test stub
(every other answer asks for a tool), recorded with ``--record`` so that
``expect_text`` reads final text. Then ``--cases`` cases, every key of the
case file among them (tools in order, forbidden and allowed tools, budgets,
``tool_called`` with matchers, the final text, models, completion), half on
the session and half on the whole capture. Reported, as medians over rounds
(max in brackets):

* load: ``Capture.load(DIR, record=RDIR)`` (every turn's output text read
  from the recording);
* judge: the cases judged on the loaded capture (what the issue bounds:
  under a second for 100 cases over 2,000 turns);
* check: the whole ``modeltap check DIR --expect CASES --record RDIR``
  in-process, text output included.

Figures depend on the machine; bench/README.md quotes one run and says where.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.view_captures import make_long_capture

from modeltap.evidence.capture import Capture
from modeltap.evidence.verdicts.cases import parse_cases
from modeltap.report import case_report
from modeltap.report.check import main as check_main

#: One case of each shape; the bench cycles through them.
SHAPES = (
    'expect_tools = ["tool_0", "tool_1", "tool_2"]',
    'forbid_tools = ["delete_account", "tool_9"]',
    'only_tools = ["tool_0", "tool_1", "tool_2", "tool_3", "tool_4", "tool_5", "tool_6"]',
    "max_tool_calls = {calls}",
    'expect_text = "stub"',
    "max_tokens = 100000000",
    "max_cost_usd = 100.0",
    'models = ["gpt-stub"]',
    "completed = true",
    '[[case.tool_called]]\nname = "tool_3"\nargs = {{ i = {{ one_of = [3, 17, {last}] }} }}',
    '[[case.tool_called]]\nname = "tool_5"\nargs = {{ i = {{ fuzzy = "1,999" }} }}',
    '[[case.tool_called]]\nname = "tool_6"\nargs = {{ i = {{ approx = {last} }} }}',
)


def case_file(count: int, turns: int) -> str:
    out = []
    for i in range(count):
        shape = SHAPES[i % len(SHAPES)].format(calls=turns, last=turns - 2)
        session = 'session = "long-1"\n' if i % 2 else ""
        head, _, tables = shape.partition("[[case.tool_called]]")
        body = head if not tables else ""
        out.append(f'[[case]]\nname = "case {i}"\n{session}{body}\n')
        if tables:
            out.append(f"[[case.tool_called]]{tables}\n")
    return "\n".join(out)


def median_max(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} ms (max {max(values) * 1000:.1f} ms)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modeltap-bench-verdicts-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        make_long_capture(root / "out", args.turns, record=root / "record")
        made = time.perf_counter() - started
        text = case_file(args.cases, args.turns)
        (root / "cases.toml").write_text(text)
        cases = parse_cases(text)
        loads, judges, checks = [], [], []
        statuses: dict[str, int] = {}
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            capture = Capture.load(root / "out", record=root / "record")
            t1 = time.perf_counter()
            judged = case_report.judge(cases, capture)
            t2 = time.perf_counter()
            loads.append(t1 - t0)
            judges.append(t2 - t1)
            statuses = case_report.summary(judged)
            argv = [str(root / "out"), "--expect", str(root / "cases.toml")]
            argv += ["--record", str(root / "record")]
            with contextlib.redirect_stdout(io.StringIO()):
                t3 = time.perf_counter()
                check_main(argv)
                checks.append(time.perf_counter() - t3)
        turns = sum(len(s.turns) for s in capture.sessions.values())
        verdicts = sum(len(j.verdicts) for j in judged)
        print(f"capture: {turns} turns, {len(capture.tool_calls)} tool calls, made in {made:.1f} s")
        print(f"cases:   {len(cases)} ({verdicts} verdicts): {statuses}")
        print(f"load:    {median_max(loads)}  Capture.load(DIR, record=RDIR)")
        print(f"judge:   {median_max(judges)}  {len(cases)} cases over {turns} turns")
        print(f"check:   {median_max(checks)}  modeltap check --expect --record, in-process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
