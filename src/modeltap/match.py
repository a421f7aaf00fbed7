"""Matchers for tool-call arguments (``tool_called("refund", amount=match.approx(500))``).

A plain value matches by equality after the arguments' JSON is decoded
(``500`` equals ``500.0``); these say something looser. They nest inside
dicts and lists. Arguments that are not valid JSON match only
:func:`anything`. The rules are :mod:`modeltap.evidence.verdicts.match`'s.
"""

from __future__ import annotations

from modeltap.evidence.verdicts.match import (
    Matcher,
    anything,
    approx,
    contains,
    equals,
    fuzzy,
    one_of,
    regex,
)

__all__ = ["Matcher", "anything", "approx", "contains", "equals", "fuzzy", "one_of", "regex"]
