"""The query API of a capture: turns, sessions, tool calls and usage.

One audited request is one :class:`Turn`, with the response and errors that
name its ``seq``; a :class:`Session` holds its turns in file order and what
belongs to no turn (refusals, unaudited pass-throughs, errors without a
``seq``). :class:`TurnQueries` gives sessions and whole captures the same
helpers, all following "unknown is not zero":

* ``tool_was_called(name)``, ``tool_call_count(name)``, ``tool_calls_for(name)``
  look at the tool calls of the recorded responses. ``name`` matches a call
  whose bare ``name`` is equal, or whose qualified name ``namespace.name``
  is equal: ``"read"`` matches ``read`` in any namespace, ``"fs.read"`` only
  ``read`` in namespace ``fs`` (or a call literally named ``fs.read``).
* ``tools_advertised()``: union of the advertised ``tool_names`` in first-seen
  order (records with ``tool_names: null`` add nothing: they are unknown).
* ``usage``: a :class:`modeltap.evidence.records.Usage` summed element-wise over the
  turns. A total is ``None`` when any turn's count is ``None`` (or there is no
  turn at all); a known zero stays zero. The counts are the providers' own
  (``events.jsonl``'s names: ``input_tokens``, ``output_tokens``,
  ``total_tokens``, ``cache_read_tokens``, ``cache_write_tokens``,
  ``reasoning_tokens``).
* ``total_tokens``: every turn's total summed, where a turn of a wire that
  reports no total (Anthropic) counts the sum of its parts
  (:func:`modeltap.apis.usage_total`); ``total_summed`` says whether any
  turn's total was summed so.

Turns are numbered from 1 wherever they are shown (``[turn 1]``, like
``seq``): :attr:`Turn.number`. :attr:`Turn.index` is the turn's 0-based
position in ``session.turns``. A turn that sends again a request that had
just failed is a retry (:mod:`modeltap.evidence.capture.retries`): ``retry_of``,
``attempt`` and ``first_attempt`` say so.
* ``cost``: the turns' estimated prices summed (:func:`sum_costs`), an
  estimate like each of them; ``None`` as soon as one turn could not be
  priced (its note says how many).

Coverage is not computed here: each turn and session carries the
:class:`~modeltap.evidence.coverage.EvidenceCoverage` that grouping
(:mod:`modeltap.evidence.capture.grouping`) got from :mod:`modeltap.evidence.coverage`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from modeltap.apis import usage_total
from modeltap.evidence.capture.executions import DeniedToolCall, McpExecution, denied_tool_calls
from modeltap.evidence.capture.lines import SessionEnd
from modeltap.evidence.coverage import (
    COMPLETE,
    NO_RESPONSE,
    USAGE_FIELDS,
    EvidenceCoverage,
    merge,
    qualified_tool_name,
    refusal_text,
    session_capture_errors,
    turn_number,
    worst_of_turns,
)
from modeltap.evidence.coverage_reasons import tool_call_matches
from modeltap.evidence.records import (
    AuditRecord,
    Cost,
    ErrorEvent,
    Event,
    McpAuditRecord,
    RejectedEvent,
    ResponseEvent,
    ToolCall,
    UnauditedEvent,
    Usage,
)
from modeltap.evidence.verdicts import Expect, Scope

__all__ = [
    "Session",
    "ToolInvocation",
    "Turn",
    "TurnQueries",
    "ms_between",
    "parse_ts",
    "sum_costs",
    "sum_usage",
    "tool_call_matches",
]


def parse_ts(ts: str | None) -> datetime | None:
    if ts is None:
        return None
    try:
        return datetime.fromisoformat(ts)
    except ValueError:
        return None


def ms_between(start: str | None, end: str | None) -> float | None:
    a, b = parse_ts(start), parse_ts(end)
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return None
    return round((b - a).total_seconds() * 1000, 3)


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """Sum usage element-wise; a count is ``None`` if any part is ``None`` or there is none.

    Args:
        usages: per-turn usage.

    Returns:
        The totals. A known zero stays zero; unknown is never read as zero.
    """
    parts = list(usages)
    if not parts:
        return Usage()
    totals: dict[str, int | None] = {}
    for name in USAGE_FIELDS:
        values = [getattr(u, name) for u in parts]
        totals[name] = None if any(v is None for v in values) else sum(values)
    return Usage(**totals)


def sum_costs(costs: Iterable[Cost | None]) -> Cost:
    """Sum estimated prices; unknown (or missing) anywhere makes the sum unknown.

    Args:
        costs: per-turn estimates (``None`` for a turn without one).

    Returns:
        A :class:`~modeltap.evidence.records.Cost` whose ``estimate_usd`` is the sum,
        or ``None`` with a note saying how many turns could not be priced;
        ``source`` names the price tables the parts came from.
    """
    parts = list(costs)
    source = ", ".join(sorted({cost.source for cost in parts if cost is not None})) or "none"
    if not parts:
        return Cost(estimate_usd=None, source=source, note="no turn to price")
    unknown = sum(1 for cost in parts if cost is None or cost.estimate_usd is None)
    if unknown:
        noun = "turn" if len(parts) == 1 else "turns"
        note = f"{unknown} of {len(parts)} {noun} could not be priced"
        return Cost(estimate_usd=None, source=source, note=note)
    total = sum(cost.estimate_usd or 0.0 for cost in parts if cost is not None)
    return Cost(estimate_usd=round(total, 12), source=source)


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """A tool call the model asked for, paired with the request that answered it.

    The result is looked for in the ``tool_results`` of the later requests of
    the same session (the first that carries the call's ``call_id``).
    """

    call: ToolCall
    turn_index: int
    result_turn_index: int | None
    result_bytes: int | None
    #: From the ``ts`` of the response event that asked for the call (written
    #: when the response ended) to the ``ts`` of the request that carried the
    #: result; ``None`` when either is unknown.
    duration_ms: float | None
    #: The result's error flag as its wire carries it (``ToolResult.is_error``);
    #: ``None`` where the wire has none, or when no result came back.
    result_is_error: bool | None = None
    #: The MCP ``tools/call`` that ran it, when one was seen (SPEC 3b);
    #: ``None``: not observed (a local tool, MCP over stdio, a server not
    #: mounted with ``--mcp``, or another session), which is not a success.
    execution: McpExecution | None = None

    @property
    def name(self) -> str | None:
        """The call's qualified name (``namespace.name`` when namespaced)."""
        return qualified_tool_name(self.call)

    @property
    def answered(self) -> bool:
        """Whether a later request carried this call's result."""
        return self.result_turn_index is not None

    @property
    def failed(self) -> bool | None:
        """Whether the tool failed, as far as the evidence says: its MCP
        execution's outcome (``isError``, a JSON-RPC or HTTP error) or the
        result's error flag; ``None`` when neither tells."""
        flags = (
            self.execution.failed if self.execution is not None else None,
            self.result_is_error,
        )
        if True in flags:
            return True
        return False if False in flags else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One audited request and what was observed for it."""

    index: int
    record: AuditRecord
    #: The ``response`` event of this request, or ``None`` if none was recorded.
    response: ResponseEvent | None
    #: ``error`` events that name this request's ``seq``.
    error_events: tuple[ErrorEvent, ...] = ()
    #: Every event that names this request's ``seq``, in file order.
    events: tuple[Event, ...] = ()
    tool_invocations: tuple[ToolInvocation, ...] = ()
    #: The earlier tool calls whose results this request carried, each with
    #: its pairings (the MCP execution that ran it, when one was seen).
    results_of: tuple[ToolInvocation, ...] = ()
    coverage: EvidenceCoverage = COMPLETE
    #: The index of the earlier attempt this turn sends again, or ``None``
    #: (:mod:`modeltap.evidence.capture.retries`).
    retry_of: int | None = None
    #: 1 for a first attempt, 2 for its first retry, ...
    attempt: int = 1
    #: The index of the first attempt of this turn's call (its own when it is one).
    first_attempt: int | None = None
    #: The output text of the response, read from a ``--record`` directory
    #: (``Capture.load(DIR, record=RDIR)``): content, so ``None`` without a
    #: recording; ``coverage.messages`` says how much of it was seen.
    output_text: str | None = None

    @property
    def expect(self) -> Expect:
        """Assertions on this turn alone (:class:`~modeltap.evidence.verdicts.Expect`)."""
        return Expect(
            Scope(
                label=f"turn {self.number} of session {self.record.session_id}",
                turns=(self,),
                sessions=(),
                coverage=self.coverage,
                target=self,
            )
        )

    @property
    def number(self) -> int:
        """The turn's number as every message shows it: from 1, like ``seq``."""
        return turn_number(self.index)

    @property
    def is_retry(self) -> bool:
        """Whether this turn sends again a request that had just failed."""
        return self.retry_of is not None

    @property
    def model(self) -> str:
        """The model the request asked for."""
        return self.record.model

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of the response (empty when there is no response)."""
        return self.response.tool_calls if self.response is not None else ()

    @property
    def usage(self) -> Usage:
        """The response's usage; all ``None`` when there is no response."""
        return self.response.usage if self.response is not None else Usage()

    @property
    def total_tokens(self) -> int | None:
        """The turn's total: as reported, or the sum of its parts for a wire
        that reports no total (:func:`modeltap.apis.usage_total`)."""
        return usage_total(self.record.api, self.usage)[0]

    @property
    def total_summed(self) -> bool:
        """Whether :attr:`total_tokens` was summed by modeltap (no reported total)."""
        return usage_total(self.record.api, self.usage)[1]

    @property
    def execution_time_ms(self) -> float | None:
        """The response's ``duration_ms``, or ``None`` if unknown."""
        return self.response.duration_ms if self.response is not None else None

    @property
    def cost(self) -> Cost | None:
        """The response's estimated price; ``None`` without a response (or an
        estimate: lines written before estimates existed)."""
        return self.response.cost if self.response is not None else None

    @property
    def errors(self) -> list[str]:
        """What went wrong in this exchange, unprefixed.

        Error events, the response's ``capture_errors``, an HTTP error status,
        and a missing response; each once (an error event and the response it
        cut say the same thing).
        """
        out = [f"{e.error}: {e.message}" for e in self.error_events]
        if self.response is None:
            out.append(NO_RESPONSE)
        else:
            if self.response.status is not None and self.response.status >= 400:
                out.append(f"upstream answered HTTP {self.response.status}")
            out.extend(self.response.capture_errors)
        return list(dict.fromkeys(out))

    @property
    def evidence_complete(self) -> bool:
        """See the module docstring: events, actions, status, data complete."""
        return self.coverage.evidence_complete

    @property
    def capture_errors(self) -> list[str]:
        """Reasons the turn's evidence is incomplete (unprefixed, deduplicated)."""
        return self.coverage.capture_errors


class TurnQueries:
    """Tool and usage helpers shared by :class:`Session` and :class:`Capture`."""

    __slots__ = ()

    def _turns(self) -> Iterable[Turn]:
        raise NotImplementedError

    def _advertised_lists(self) -> Iterable[tuple[str, ...] | None]:
        return (turn.record.tool_names for turn in self._turns())

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call of every recorded response, in order."""
        return [call for turn in self._turns() for call in turn.tool_calls]

    def tool_calls_for(self, name: str) -> list[ToolCall]:
        """Return the tool calls matching ``name`` (bare name or ``namespace.name``).

        Args:
            name: ``"read"`` matches ``read`` in any namespace; ``"fs.read"``
                matches ``read`` in namespace ``fs`` (or a call named ``fs.read``).

        Returns:
            The matching calls in order.
        """
        return [call for call in self.tool_calls if tool_call_matches(call, name)]

    def tool_call_count(self, name: str) -> int:
        """Return how many calls match ``name`` (see :meth:`tool_calls_for`)."""
        return len(self.tool_calls_for(name))

    def tool_was_called(self, name: str) -> bool:
        """Return whether any call matches ``name`` (see :meth:`tool_calls_for`).

        ``False`` is only a proof of absence when ``evidence_complete`` is true.
        """
        return any(tool_call_matches(call, name) for call in self.tool_calls)

    def tools_advertised(self) -> list[str]:
        """Return the union of advertised tool names, in first-seen order."""
        seen: dict[str, None] = {}
        for names in self._advertised_lists():
            for name in names or ():
                seen.setdefault(name, None)
        return list(seen)

    @property
    def usage(self) -> Usage:
        """Usage summed over the turns (see :func:`sum_usage`: unknown stays unknown)."""
        return sum_usage(turn.usage for turn in self._turns())

    @property
    def total_tokens(self) -> int | None:
        """The turns' totals summed (:attr:`Turn.total_tokens`); ``None`` when
        any is unknown or there is no turn."""
        totals = [turn.total_tokens for turn in self._turns()]
        if not totals or any(t is None for t in totals):
            return None
        return sum(t for t in totals if t is not None)

    @property
    def total_summed(self) -> bool:
        """Whether any turn's total was summed by modeltap (:attr:`Turn.total_summed`)."""
        return any(turn.total_summed for turn in self._turns())

    @property
    def retries(self) -> int:
        """How many turns were retries of an earlier attempt."""
        return sum(1 for turn in self._turns() if turn.is_retry)

    @property
    def cost(self) -> Cost:
        """The estimated price summed over the turns (see :func:`sum_costs`)."""
        return sum_costs(turn.cost for turn in self._turns())


@dataclass(frozen=True, slots=True, kw_only=True)
class Session(TurnQueries):
    """Everything captured for one session id."""

    session_id: str
    run_ids: tuple[str, ...]
    turns: tuple[Turn, ...]
    #: Requests refused before forwarding (they have no audit record).
    refusals: tuple[RejectedEvent, ...] = ()
    unaudited: tuple[UnauditedEvent, ...] = ()
    #: ``error`` events that belong to no audited request.
    errors: tuple[ErrorEvent, ...] = ()
    #: Every event of the session, in file order.
    events: tuple[Event, ...] = ()
    #: Events whose ``seq`` names no audit record (e.g. the record's line was torn).
    orphan_events: tuple[Event, ...] = ()
    #: The session's ``sessions.jsonl`` lines (one per run that ended it).
    ends: tuple[SessionEnd, ...] = ()
    #: What lowers the session's coverage outside any turn.
    own_coverage: EvidenceCoverage = COMPLETE
    #: Its MCP audit lines (SPEC 3b), one per client-to-server message, in file order.
    mcp_records: tuple[McpAuditRecord, ...] = ()
    #: Its ``mcp_*`` events (results, server requests, notifications, streams),
    #: in file order; they are in :attr:`events` too.
    mcp_events: tuple[Event, ...] = ()
    #: Its MCP tool executions (``tools/call``), in the order they began, each
    #: with the model call it ran when one asked for it.
    mcp_executions: tuple[McpExecution, ...] = ()

    @property
    def denied_tool_calls(self) -> tuple[DeniedToolCall, ...]:
        """The MCP ``tools/call`` messages refused before they reached their server."""
        return denied_tool_calls(self.refusals)

    @property
    def unasked_executions(self) -> tuple[McpExecution, ...]:
        """The executions no model call of this session asked for."""
        return tuple(e for e in self.mcp_executions if e.call is None)

    def _turns(self) -> Iterable[Turn]:
        return self.turns

    @property
    def expect(self) -> Expect:
        """Assertions on this session (:class:`~modeltap.evidence.verdicts.Expect`);
        tool calls are counted across its turns in call order."""
        return Expect(
            Scope(
                label=f"session {self.session_id}",
                turns=self.turns,
                sessions=(self,),
                coverage=self.coverage,
                target=self,
            )
        )

    @property
    def tool_invocations(self) -> list[ToolInvocation]:
        """Every tool call with its result pairing, flattened in turn order."""
        return [inv for turn in self.turns for inv in turn.tool_invocations]

    @property
    def stop_reason(self) -> str | None:
        """The last ``stop_reason`` in ``sessions.jsonl``, or ``None`` if none was written."""
        return self.ends[-1].stop_reason if self.ends else None

    @property
    def execution_time_ms(self) -> float | None:
        """Sum of the turns' response durations; ``None`` if any is unknown or no turn."""
        times = [turn.execution_time_ms for turn in self.turns]
        if not times or any(t is None for t in times):
            return None
        return round(sum(t for t in times if t is not None), 3)

    @property
    def error_messages(self) -> list[str]:
        """Turn errors prefixed ``[turn N]``, then refusals and errors outside turns."""
        out = [f"[turn {turn.number}] {msg}" for turn in self.turns for msg in turn.errors]
        out.extend(refusal_text(e.rule, e.message) for e in self.refusals)
        out.extend(f"{e.error}: {e.message}" for e in self.errors)
        return out

    @property
    def coverage(self) -> EvidenceCoverage:
        """The worst over the turns, lowered by what happened outside them."""
        return merge(worst_of_turns((t.index, t.coverage) for t in self.turns), self.own_coverage)

    @property
    def evidence_complete(self) -> bool:
        """Whether ``events``, ``actions``, ``status`` and ``data`` are complete.

        Equivalent to ``capture_errors == []``; see the module docstring.
        """
        return self.coverage.evidence_complete

    @property
    def capture_errors(self) -> list[str]:
        """Why the evidence is incomplete: turn reasons as ``[turn N] ...``, then the session's."""
        return session_capture_errors(
            ((t.index, t.coverage) for t in self.turns), self.own_coverage
        )
