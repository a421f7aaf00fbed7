"""Which later request answers a tool call: by id, or by position (pure; no I/O).

One rule, kept here once, for everything that pairs a call with its result:
the evidence fold (:class:`~modeltap.evidence.coverage.SessionEvidence`, so the
report, ``modeltap check`` and the proxy's session lines), the tool-call
budget (:class:`~modeltap.core.sessions.SessionTracker`) and the ``execute_tool``
spans (:class:`~modeltap.telemetry.tree.SpanTree`). They cannot disagree
about which request carried a call's result.

- A call with a ``call_id`` is answered by the first later request carrying a
  result with that id.
- A call without one (Gemini's Developer API sends none) is paired by
  position, as Gemini pairs function responses with calls: the calls without
  ids of a session, in order, are answered by the first later request whose
  results without a known id number exactly those already answered plus those
  waiting (a client resends its whole history), the waiting calls taking the
  last of them in order. A request whose count differs (history cut, two
  conversations in one session) answers none of them.
- A result's id is known when a response of the session named it, from the
  session's first call without an id on (a session without such calls keeps
  no state per call). Gemini CLI gives an id-less call an id of its own
  making, which no response named, so its results count as results without
  id. At most :data:`MAX_NAMED_IDS` ids are kept; past that, pairing by
  position stops and such calls stay unanswered.

The caller feeds the calls of each response (:meth:`ToolPairing.asked`) and
the results of each later request (:meth:`ToolPairing.answer`) in the order
they happen, and attaches whatever it needs to each call (a label, a number,
a span's start).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from modeltap.evidence.records import ToolResult

#: The most call ids a session pairing calls without ids by position keeps.
MAX_NAMED_IDS: Final = 10_000


class ToolPairing[T]:
    """The tool calls of one session awaiting their results, each with its item."""

    __slots__ = ("_anonymous", "_anonymous_answered", "_named", "_overflow", "_pending", "_waiting")

    def __init__(self) -> None:
        #: call_id -> the items of the calls with that id, unanswered.
        self._pending: dict[str, list[T]] = {}
        #: Items of the calls without an id waiting for their result, in order.
        self._anonymous: list[T] = []
        #: How many calls without an id were answered (their results stay in
        #: the history a client resends).
        self._anonymous_answered = 0
        #: The ids responses named since the session's first call without one;
        #: None before it, and past MAX_NAMED_IDS.
        self._named: set[str] | None = None
        self._overflow = False
        self._waiting = 0

    def __len__(self) -> int:
        """How many calls wait for their result."""
        return self._waiting

    def asked(self, call_id: str | None, item: T) -> None:
        """A response asked for a call: await its result.

        Args:
            call_id: the call's id as the response gave it (``None``: none).
            item: what the caller keeps for this call.
        """
        self._waiting += 1
        if call_id is None:
            if self._named is None and not self._overflow:
                self._named = set()  # the session's first call without an id
            self._anonymous.append(item)
            return
        self._pending.setdefault(call_id, []).append(item)
        if self._named is not None:
            self._named.add(call_id)
            if len(self._named) > MAX_NAMED_IDS:
                self._named, self._overflow = None, True

    def peek(self, tool_results: Iterable[ToolResult]) -> list[tuple[T, int]]:
        """The calls a request's results would answer, changing nothing.

        Args:
            tool_results: the results the request carries.

        Returns:
            ``(item, result bytes)`` per call answered: calls answered by id
            first, in the order of the results, then those answered by
            position, oldest first.
        """
        return self._match(list(tool_results), commit=False)

    def answer(self, tool_results: Iterable[ToolResult]) -> list[tuple[T, int]]:
        """Take in a request's results: the calls they answer stop waiting.

        Args:
            tool_results: the results the request carries.

        Returns:
            As :meth:`peek`.
        """
        return self._match(list(tool_results), commit=True)

    def waiting(self) -> Iterator[tuple[str | None, T]]:
        """The calls still waiting, as ``(call_id, item)``: by id, then without id."""
        for call_id, items in self._pending.items():
            for item in items:
                yield call_id, item
        for item in self._anonymous:
            yield None, item

    def _match(self, results: list[ToolResult], *, commit: bool) -> list[tuple[T, int]]:
        # Which results count as without id is read once, before any call stops
        # waiting, so the count and the pairing agree.
        unknown = [self._unknown(result) for result in results]
        answered: list[tuple[T, int]] = []
        seen: set[str] = set()
        for result, without_id in zip(results, unknown, strict=True):
            call_id = result.call_id
            if without_id or call_id is None or call_id in seen:
                continue
            seen.add(call_id)
            items = self._pending.pop(call_id, None) if commit else self._pending.get(call_id)
            answered.extend((item, result.bytes) for item in items or ())
        sizes = [
            result.bytes for result, without_id in zip(results, unknown, strict=True) if without_id
        ]
        waiting = len(self._anonymous)
        if waiting and self._named is not None and len(sizes) == self._anonymous_answered + waiting:
            # By position: the newest results answer the waiting calls, in order.
            answered.extend(zip(self._anonymous, sizes[self._anonymous_answered :], strict=True))
            if commit:
                self._anonymous_answered += waiting
                self._anonymous = []
        if commit:
            self._waiting -= len(answered)
        return answered

    def _unknown(self, result: ToolResult) -> bool:
        """Whether a result counts as one without id: it has none, or (once the
        session pairs by position) an id that no response named."""
        if result.call_id is None:
            return True
        named = self._named
        if named is None:
            return False
        return result.call_id not in named and result.call_id not in self._pending
