"""Verdicts over the evidence: assertions that know what they cannot know.

Evidence is not a verdict, but users write verdicts over it, and the easy
ones lie: ``assert not capture.tool_was_called("delete_file")`` passes when
the proxy never saw the tool calls. Here every assertion has three outcomes
(``passed``, ``failed``, ``unavailable``), by the coverage rule of
``seeds/002`` (:mod:`~modeltap.evidence.verdicts.assertions`):

* :mod:`~modeltap.evidence.verdicts.verdict`: :class:`Verdict`, the roll-up
  :class:`Verdicts` (``modeltap.verdicts``), and the hook that lets the
  pytest plugin see every verdict a test made;
* :mod:`~modeltap.evidence.verdicts.match`: the argument matchers
  (``modeltap.match``);
* :mod:`~modeltap.evidence.verdicts.scope`: what a capture, a session or a
  turn shows a verdict;
* :mod:`~modeltap.evidence.verdicts.assertions`: :class:`Expect`, what
  ``capture.expect``, ``session.expect`` and ``turn.expect`` are;
* :mod:`~modeltap.evidence.verdicts.cases`: the cases of a TOML case file
  (``modeltap check --expect``), judged on a capture.
"""

from __future__ import annotations

from modeltap.evidence.verdicts.assertions import TOKEN_KINDS, Expect
from modeltap.evidence.verdicts.scope import Scope
from modeltap.evidence.verdicts.verdict import (
    FAILED,
    PASSED,
    UNAVAILABLE,
    Status,
    Verdict,
    Verdicts,
    verdicts,
    watch_verdicts,
)

__all__ = [
    "FAILED",
    "PASSED",
    "TOKEN_KINDS",
    "UNAVAILABLE",
    "Expect",
    "Scope",
    "Status",
    "Verdict",
    "Verdicts",
    "verdicts",
    "watch_verdicts",
]
