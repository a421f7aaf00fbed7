"""A verdict and a roll-up of verdicts: three outcomes, never a silent gap (pure).

A :class:`Verdict` is ``passed``, ``failed`` or ``unavailable`` (the evidence
it needs was not fully collected, and what was collected does not decide it:
``seeds/002``'s "How coverage changes assertion results"). ``bool(v)`` is
true only for ``passed`` or an *optional* ``unavailable``
(:meth:`Verdict.optional`), so ``assert v`` never turns a collection gap
green by accident; ``str(v)`` says what was asserted, what was found and,
when unavailable, which channel, why, and what would make it available.

:class:`Verdicts` rolls several up (``modeltap.verdicts(...)``): failed if
any failed, else unavailable if any non-optional one is, else passed; its
text is ``seeds/003``'s report (``[PASS]`` / ``[FAIL]`` / ``[UNAVAILABLE]``,
one line per verdict that did not pass).

Whoever wants to see every verdict made (the pytest plugin, to list the
unavailable ones in its summary) registers with :func:`watch_verdicts`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from modeltap.rules.printable import printable

__all__ = [
    "FAILED",
    "PASSED",
    "REMEDIES",
    "STATUSES",
    "UNAVAILABLE",
    "Status",
    "Verdict",
    "Verdicts",
    "verdicts",
    "watch_verdicts",
]

Status = Literal["passed", "failed", "unavailable"]
PASSED: Final = "passed"
FAILED: Final = "failed"
UNAVAILABLE: Final = "unavailable"
STATUSES: Final = (PASSED, FAILED, UNAVAILABLE)

#: What makes each evidence channel available, in the words a verdict ends with.
REMEDIES: Final[dict[str, str]] = {
    "events": "a capture in which every request got a response that was seen whole "
    "(no cut stream, no upstream failure)",
    "actions": "a capture in which every response was seen whole and every tool call "
    "got its result in a later request (or ran on an --mcp server, its answer seen)",
    "messages": "the run recorded with `modeltap run --record RDIR` (the pytest fixture: "
    "record=RDIR), read with Capture.load(DIR, record=RDIR) or `modeltap check|view "
    "--record RDIR`",
    "usage": "responses that report token usage (a whole response, seen to its end)",
    "status": "sessions that ended (`modeltap session end ID`, or the proxy stopped) "
    "with no refusal and no error",
    "data": "a capture whose lines are all readable and link up",
}

_counter = itertools.count(1)
_watchers: list[list[Verdict]] = []


@contextlib.contextmanager
def watch_verdicts() -> Iterator[list[Verdict]]:
    """Collect every verdict made while the block runs (optional copies too).

    Yields:
        The list the verdicts are appended to, in the order they were made.
    """
    made: list[Verdict] = []
    _watchers.append(made)
    try:
        yield made
    finally:
        _watchers.remove(made)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One assertion's outcome over a capture, a session or a turn.

    Attributes:
        status: ``passed``, ``failed`` or ``unavailable``.
        name: what was asserted, as code writes it (``tool_called('refund', amount=500)``).
        reason: for ``failed``, what was expected and what was found; for
            ``unavailable``, the channel and its coverage reason; for
            ``passed``, the evidence that passed it.
        channel: the evidence channel it reads (``actions``, ``messages``,
            ``usage``, ``status``, ``data``; several joined with ``+`` for
            ``that(needs=...)``), or ``None``.
        details: for argument assertions, one entry per asserted tool
            (``expected_tool``, ``args_asserted``, ``matched_call_index``, -1
            when none, ``unmatched_reason``).
        scope: what it was judged on (``the capture``, ``session s1``, ``turn 2 of session s1``).
        hint: for ``unavailable``, what would make the channel available.
        is_optional: marked with :meth:`optional`: an ``unavailable`` outcome
            does not fail ``bool()`` or a roll-up, and is still listed.
    """

    status: Status
    name: str
    reason: str | None = None
    channel: str | None = None
    details: tuple[dict[str, Any], ...] | None = None
    scope: str = "the capture"
    hint: str | None = None
    is_optional: bool = False
    #: Which assertion this is, kept by :meth:`optional` copies (for watchers).
    key: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"a verdict's status is one of {', '.join(STATUSES)}")
        if not self.key:
            object.__setattr__(self, "key", next(_counter))
        for made in _watchers:
            made.append(self)

    @property
    def passed(self) -> bool:
        """Whether the assertion passed."""
        return self.status == PASSED

    @property
    def failed(self) -> bool:
        """Whether evidence contradicts the assertion."""
        return self.status == FAILED

    @property
    def unavailable(self) -> bool:
        """Whether the evidence cannot decide it."""
        return self.status == UNAVAILABLE

    def optional(self) -> Verdict:
        """This verdict marked optional: unavailable then does not fail it (still listed)."""
        return dataclasses.replace(self, is_optional=True, key=self.key)

    def __bool__(self) -> bool:
        return self.status == PASSED or (self.status == UNAVAILABLE and self.is_optional)

    @property
    def headline(self) -> str:
        """``name: status`` with ``(optional)`` when marked so."""
        mark = " (optional)" if self.is_optional else ""
        return f"{self.name}: {self.status}{mark}"

    def __str__(self) -> str:
        text = f"{self.name} on {self.scope}: {self.status.upper()}"
        if self.is_optional:
            text += " (optional)"
        if self.reason:
            text += f". {_sentence(self.reason)}"
        if self.status == UNAVAILABLE:
            if self.hint:
                hint = self.hint.strip()
                text += f" It becomes available with {hint.rstrip('.')}."
            if self.is_optional:
                text += " Marked optional: it does not fail, and is still listed."
        elif not text.endswith("."):
            text += "."
        return printable(text)

    def __repr__(self) -> str:
        # pytest prints this on one line after `assert`; the plugin adds str(v).
        return printable(f"<Verdict {self.headline} on {self.scope}: {self.reason or ''}>")

    def to_dict(self) -> dict[str, Any]:
        """The verdict's JSON (``schemas/verdicts.schema.json``'s ``verdict``)."""
        return {
            "status": self.status,
            "name": self.name,
            "scope": self.scope,
            "reason": self.reason,
            "channel": self.channel,
            "hint": self.hint,
            "optional": self.is_optional,
            "details": None if self.details is None else [dict(d) for d in self.details],
        }


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def rolled_up(items: Iterable[Verdict]) -> Status:
    """Failed if any failed, else unavailable if any non-optional one is, else passed."""
    listed = list(items)
    if any(v.status == FAILED for v in listed):
        return FAILED
    if any(v.status == UNAVAILABLE and not v.is_optional for v in listed):
        return UNAVAILABLE
    return PASSED


_MARKS: Final = {PASSED: "PASS", FAILED: "FAIL", UNAVAILABLE: "UNAVAILABLE"}


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Several verdicts rolled up (``modeltap.verdicts(v1, v2, ...)``).

    ``status`` is failed if any failed, else unavailable if any non-optional
    one is, else passed; ``bool()`` is true only for passed; ``str()`` prints
    ``[PASS]`` / ``[FAIL]`` / ``[UNAVAILABLE]`` with one line per verdict that
    did not pass (optional gaps included, marked), then the tally.
    """

    items: tuple[Verdict, ...]
    name: str = "verdicts"

    @property
    def status(self) -> Status:
        """The rolled-up outcome."""
        return rolled_up(self.items)

    def __bool__(self) -> bool:
        return self.status == PASSED

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def not_passed(self) -> list[Verdict]:
        """The verdicts that did not pass (optional unavailable ones included)."""
        return [v for v in self.items if v.status != PASSED]

    def lines(self) -> list[str]:
        """The roll-up's head line and one line per verdict that did not pass."""
        out = [f"[{_MARKS[self.status]}] {printable(self.name)}"]
        for verdict in self.not_passed:
            mark = " (optional)" if verdict.is_optional else ""
            out.append(f"       - {verdict.status}{mark}: {printable(_one_line(verdict))}")
        return out

    def __str__(self) -> str:
        counts = {s: sum(1 for v in self.items if v.status == s) for s in STATUSES}
        tally = (
            f"{counts[PASSED]}/{len(self.items)} passed, {counts[FAILED]} failed, "
            f"{counts[UNAVAILABLE]} unavailable"
        )
        return "\n".join([*self.lines(), "", tally])

    def __repr__(self) -> str:
        return f"<Verdicts {self.status}: {len(self.not_passed)} of {len(self.items)} did not pass>"

    def to_dict(self) -> dict[str, Any]:
        """``{"name", "status", "verdicts": [...]}``."""
        return {
            "name": self.name,
            "status": self.status,
            "verdicts": [v.to_dict() for v in self.items],
        }


def _one_line(verdict: Verdict) -> str:
    """A verdict as one roll-up line: name and reason (its hint is in ``str(v)``)."""
    where = "" if verdict.scope == "the capture" else f" [{verdict.scope}]"
    return f"{verdict.name}{where}: {verdict.reason or verdict.status}"


def verdicts(*items: Verdict | Verdicts, name: str = "verdicts") -> Verdicts:
    """Roll verdicts up (``modeltap.verdicts``); a roll-up given is flattened.

    Args:
        items: verdicts, or roll-ups of them.
        name: the head line's name (a case's name).

    Returns:
        The roll-up.
    """
    flat: list[Verdict] = []
    for item in items:
        if isinstance(item, Verdicts):
            flat.extend(item.items)
        elif isinstance(item, Verdict):
            flat.append(item)
        else:
            raise TypeError(f"verdicts() takes Verdict objects, not {type(item).__name__}")
    return Verdicts(tuple(flat), name)
