"""Evidence coverage: the one definition of complete evidence (pure; no I/O).

Everything that says whether a session's evidence is complete computes it
here: the proxy's live :class:`~modeltap.core.sessions.SessionTracker` (its
``sessions.jsonl`` line), :class:`~modeltap.evidence.capture.Capture` (and so
``modeltap report`` and ``modeltap check``). Both feed one
:class:`SessionEvidence` with the same kinds of lines — audit records,
``response``, ``error`` and ``rejected`` events — so they cannot disagree
about what makes a session incomplete.

Each turn (one audited request) gets six channels, each ``complete``,
``partial`` or ``unavailable`` with reasons. A turn can only lower a channel;
a session is the worst over its turns plus what happened outside them.

* ``events``: partial when a request has no response, or its response was
  not seen completely (``evidence_complete: false``; the reason carries the
  response's ``capture_errors``, or says "no response" when the upstream
  never answered: the error event that says why lowers ``status``, so the
  failure is named once).
* ``actions``: partial when a tool call never got its result in a later
  request of the session (the reason names the call), or when the response
  that would list the calls is missing or incomplete. Which request answers a
  call is :mod:`modeltap.evidence.pairing`'s rule: by ``call_id``, or by position for
  calls without one (Gemini's Developer API); a call that no request matches
  stays unanswered, and says why. A call whose result never came back is
  still complete *from the tool side* when the MCP ``tools/call`` that ran it
  was audited and its answer read whole (:meth:`SessionEvidence.mcp_call`,
  :meth:`SessionEvidence.mcp_result`; which execution ran which call is
  :mod:`modeltap.evidence.mcp_pairing`'s rule, the one the tool-call budget
  uses). A call with neither says whether the session saw MCP traffic at
  all: MCP over stdio, or a server not mounted with ``--mcp``, is not seen,
  and then nothing can be complete from the tool side (said of a call
  named as agents name MCP tools, ``mcp__NAME__tool``). The fold takes MCP
  lines in the order the proxy wrote them: an execution runs a call after
  the response that asked for it began and before the request that carries
  its result (a call whose result came back unexecuted stops waiting). An MCP execution no
  model call asked for lowers ``actions`` too (in a session with turns),
  naming it.
* ``messages``: always unavailable: message content is not recorded.
* ``usage``: a turn's is unavailable when it has no usage at all ("no
  response" when the upstream never answered, an error answer's status, or
  that the provider reported none); partial when a count the response's wire
  carries is ``null``. A session's is unavailable only when no turn has any,
  partial when some turns do (:func:`usage_status`). What a wire carries is its
  API module's knowledge
  (:attr:`~modeltap.apis.contract.WireApi.REPORTED_USAGE`): OpenAI has no
  cache-write count and Anthropic no total, so their absence lowers nothing.
* ``status``: partial when a request was refused, an ``error`` event
  happened, or a request's outcome is unknown (no response).
* ``data``: partial when lines are missing or do not link up (the reader
  says which), or when an out file was moved or deleted under the running
  proxy while the session had lines in it (a ``file_reopened`` event with
  ``lost_lines``: :meth:`SessionEvidence.file_reopened`).

The reasons' words (and turn numbering) are :mod:`modeltap.evidence.coverage_reasons`'.

A session with no audited request has ``events``, ``actions``, ``usage`` and
``status`` unavailable: "No outbound model requests captured; audit
unsupported". ``evidence_complete`` is true exactly when ``events``,
``actions``, ``status`` and ``data`` are complete; ``capture_errors`` lists
their reasons, turn reasons prefixed ``[turn N]`` (turns numbered from 1,
like ``seq``: :func:`turn_number`). A refusal is named by its rule once:
``request refused (RULE): what`` (:func:`refusal_text`).

The fold is fed in turn order: a turn's audit record, then its response and
error events, then the next turn. A tool call is answered by the first later
request that carries its result. The proxy feeds lines as they happen, which
is the same order for any agent that waits for a tool call before sending its
result. Memory: the fold keeps only what is still open (requests without a
response, tool calls without a result, MCP executions without their answer
or their model call, each bounded) and the turns that lowered a channel, so
a 10,000-message WebSocket session that goes well holds next to nothing.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from modeltap.apis import reported_usage
from modeltap.apis.mcp.names import named_as_mcp_tool
from modeltap.evidence.coverage_reasons import (
    MESSAGES_NOT_RECORDED,
    NO_ANSWER,
    NO_MCP_SEEN,
    NO_MODEL_REQUEST,
    NO_REQUESTS,
    NO_RESPONSE,
    NOT_EXECUTED_ON_MCP,
    PROXY_REPORTED,
    file_moved_reason,
    is_error_answer,
    label_indexes,
    mcp_only,
    never_answered,
    no_usage_reason,
    qualified_tool_name,
    refusal_text,
    turn_number,
    unasked_execution,
)
from modeltap.evidence.mcp_pairing import MAX_WAITING, Execution, ExecutionPairing
from modeltap.evidence.pairing import ToolPairing
from modeltap.evidence.records import (
    USAGE_COUNTS,
    AuditRecord,
    ErrorEvent,
    McpAuditRecord,
    McpResultEvent,
    RejectedEvent,
    ResponseEvent,
    SessionStatus,
)

# Of the reasons' words (they live in coverage_reasons), those other modules read from here.
__all__ = [
    "CHANNELS",
    "COMPLETE",
    "EVIDENCE_CHANNELS",
    "MESSAGES_NOT_RECORDED",
    "NO_REQUESTS",
    "NO_RESPONSE",
    "PROXY_REPORTED",
    "USAGE_FIELDS",
    "Answer",
    "ChannelCoverage",
    "CoverageStatus",
    "EvidenceCoverage",
    "SessionCoverage",
    "SessionEvidence",
    "merge",
    "qualified_tool_name",
    "refusal_text",
    "session_capture_errors",
    "starts_execution",
    "turn_number",
    "usage_status",
    "worst_of_turns",
]

#: The MCP method whose requests are tool executions (SPEC 3b).
TOOLS_CALL: Final = "tools/call"
#: A ``resultType`` that is not the end of its execution (2026-07-28): the
#: client retries the ``tools/call`` with the input asked for.
INPUT_REQUIRED: Final = "input_required"

CoverageStatus = Literal["complete", "partial", "unavailable"]
CHANNELS: Final = ("events", "actions", "messages", "usage", "status", "data")
#: The channels ``evidence_complete`` and ``capture_errors`` are made of.
EVIDENCE_CHANNELS: Final = ("events", "actions", "status", "data")
#: The usage counts, in order (the names of ``events.jsonl``'s ``usage``).
USAGE_FIELDS: Final = USAGE_COUNTS

_RANK: Final[dict[str, int]] = {"complete": 0, "partial": 1, "unavailable": 2}


@dataclass(frozen=True, slots=True)
class ChannelCoverage:
    """One evidence channel: ``complete``, or ``partial`` / ``unavailable`` with reasons."""

    status: CoverageStatus = "complete"
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str | None:
        """The reasons joined with ``"; "``, or ``None`` when complete."""
        return "; ".join(self.reasons) if self.reasons else None

    def lower(self, status: CoverageStatus, reason: str) -> ChannelCoverage:
        """Return this channel lowered to ``status`` (never raised) with one more reason."""
        worst = status if _RANK[status] > _RANK[self.status] else self.status
        reasons = self.reasons if reason in self.reasons else (*self.reasons, reason)
        return ChannelCoverage(worst, reasons)

    def to_json(self) -> dict[str, str | list[str]]:
        """Return ``{"status": ...}`` plus, when not complete, ``"reason"`` (the
        reasons joined with ``"; "``) and ``"reasons"`` (the list)."""
        out: dict[str, str | list[str]] = {"status": self.status}
        if self.status != "complete":
            out["reason"] = self.reason or "no reason recorded"
            out["reasons"] = list(self.reasons) or ["no reason recorded"]
        return out


@dataclass(frozen=True, slots=True)
class EvidenceCoverage:
    """The six evidence channels of one turn, session or capture."""

    events: ChannelCoverage = ChannelCoverage()
    actions: ChannelCoverage = ChannelCoverage()
    messages: ChannelCoverage = ChannelCoverage("unavailable", (MESSAGES_NOT_RECORDED,))
    usage: ChannelCoverage = ChannelCoverage()
    status: ChannelCoverage = ChannelCoverage()
    data: ChannelCoverage = ChannelCoverage()

    def channel(self, name: str) -> ChannelCoverage:
        """Return the channel called ``name`` (one of :data:`CHANNELS`)."""
        value: ChannelCoverage = getattr(self, name)
        return value

    def lower(self, name: str, status: CoverageStatus, reason: str) -> EvidenceCoverage:
        """Return a copy with channel ``name`` lowered (see :meth:`ChannelCoverage.lower`)."""
        return dataclasses.replace(self, **{name: self.channel(name).lower(status, reason)})

    @property
    def evidence_complete(self) -> bool:
        """Whether the ``events``, ``actions``, ``status`` and ``data`` channels are complete."""
        return all(self.channel(name).status == "complete" for name in EVIDENCE_CHANNELS)

    @property
    def capture_errors(self) -> list[str]:
        """The reasons of the evidence channels, each once, in channel order."""
        out: list[str] = []
        for name in EVIDENCE_CHANNELS:
            for reason in self.channel(name).reasons:
                if reason not in out:
                    out.append(reason)
        return out

    def to_json(self) -> dict[str, dict[str, str | list[str]]]:
        """Return ``{channel: {"status", "reason"?, "reasons"?}}`` for the six channels."""
        return {name: self.channel(name).to_json() for name in CHANNELS}


#: A turn whose every channel is complete (usage included).
COMPLETE: Final = EvidenceCoverage()


def starts_execution(record: McpAuditRecord) -> bool:
    """Whether an MCP audit line begins a tool execution: a ``tools/call``
    request that is not the ``input_required`` retry of an earlier one."""
    return (
        record.message_type == "request"
        and record.mcp_method == TOOLS_CALL
        and record.tool_name is not None
        and record.continues_seq is None
    )


def execution_of(record: McpAuditRecord) -> Execution:
    """An execution's audit line as :mod:`modeltap.evidence.mcp_pairing` reads it."""
    assert record.tool_name is not None  # starts_execution
    return Execution(
        server=record.mcp_server,
        tool=record.tool_name,
        arguments_sha256=record.arguments_sha256,
        tool_call_id=record.tool_call_id,
    )


def worst_of_turns(
    turns: Iterable[tuple[int, EvidenceCoverage]], count: int | None = None
) -> EvidenceCoverage:
    """Combine turn coverage: worst status per channel, reasons labelled by turn.

    ``usage`` is the one channel whose worst is not the session's: it is
    ``unavailable`` only when no turn reported any usage, and ``partial``
    when some did (:func:`usage_status`: what the page's and the report's
    "81 in 5 of 6 turns" say).

    Args:
        turns: ``(turn index, coverage)`` in turn order; complete turns may be left out.
        count: how many turns there are in all, when complete ones were left
            out (by default, those given).

    Returns:
        The combined coverage; ``messages`` is left at its constant value.
    """
    listed = list(turns)
    coverage = EvidenceCoverage()
    for name in CHANNELS:
        if name == "messages":
            continue  # the same for every turn; kept as the session's own
        worst: CoverageStatus = "complete"
        by_reason: dict[str, list[int]] = {}
        for index, turn in listed:
            channel = turn.channel(name)
            if _RANK[channel.status] > _RANK[worst]:
                worst = channel.status
            for reason in channel.reasons:
                by_reason.setdefault(reason, []).append(index)
        if name == "usage":
            statuses = [turn.channel(name).status for _, turn in listed]
            left_out: list[CoverageStatus] = ["complete"] * (
                (len(listed) if count is None else count) - len(listed)
            )
            worst = usage_status([*statuses, *left_out])
        if worst != "complete":
            reasons = tuple(
                f"{label_indexes([turn_number(i) for i in ix], 'turn')} {r}"
                for r, ix in by_reason.items()
            )
            coverage = dataclasses.replace(coverage, **{name: ChannelCoverage(worst, reasons)})
    return coverage


def usage_status(turns: Iterable[CoverageStatus]) -> CoverageStatus:
    """The usage of several turns from each one's: the one rule.

    Args:
        turns: each turn's ``usage`` status.

    Returns:
        ``complete`` when every turn's is (or there are none);
        ``unavailable`` when no turn reported any usage; else ``partial``
        (some turns or counts are known: their sum is a lower bound).
    """
    statuses = list(turns)
    if all(status == "complete" for status in statuses):
        return "complete"
    if all(status == "unavailable" for status in statuses):
        return "unavailable"
    return "partial"


def merge(a: EvidenceCoverage, b: EvidenceCoverage) -> EvidenceCoverage:
    """Channel by channel: the worse status, both sets of reasons.

    Args:
        a: one coverage.
        b: another.

    Returns:
        The merged coverage.
    """
    merged = a
    for name in CHANNELS:
        channel = b.channel(name)
        for reason in channel.reasons:
            merged = merged.lower(name, channel.status, reason)
    return merged


def session_capture_errors(
    turns: Iterable[tuple[int, EvidenceCoverage]], own: EvidenceCoverage
) -> list[str]:
    """A session's ``capture_errors``: ``[turn i] reason`` in turn order, then its own.

    Args:
        turns: ``(turn index, coverage)`` in turn order.
        own: what lowered the session outside its turns.

    Returns:
        Each reason once.
    """
    out: list[str] = []
    for index, coverage in turns:
        for reason in coverage.capture_errors:
            line = f"[turn {turn_number(index)}] {reason}"
            if line not in out:
                out.append(line)
    for reason in own.capture_errors:
        if reason not in out:
            out.append(reason)
    return out


@dataclass(frozen=True, slots=True)
class Answer:
    """The request that carried a tool call's result (kept when asked for)."""

    turn: int
    result_bytes: int | None


@dataclass(frozen=True, slots=True)
class SessionCoverage:
    """What :meth:`SessionEvidence.result` gives: per turn, the session's own, combined."""

    #: Turns that lowered a channel, by index (a turn left out is complete).
    turns: Mapping[int, EvidenceCoverage]
    #: What lowered the session outside any turn.
    own: EvidenceCoverage
    coverage: EvidenceCoverage
    capture_errors: list[str]

    @property
    def evidence_complete(self) -> bool:
        """Whether ``events``, ``actions``, ``status`` and ``data`` are complete."""
        return self.coverage.evidence_complete


class SessionEvidence:
    """Fold one session's lines, in turn order, into its evidence coverage.

    Args:
        usage: also follow the ``usage`` channel (not part of complete
            evidence; the proxy leaves it out so a provider that never
            reports usage costs it no memory).
        keep_answers: remember which request answered each tool call
            (:attr:`answers`; readers use it, the proxy does not).
    """

    __slots__ = (
        "_call_execution",
        "_calls",
        "_continues",
        "_executions",
        "_lowered",
        "_open",
        "_own",
        "_reported",
        "_unanswered",
        "_unasked",
        "_usage",
        "answered",
        "answers",
        "executed_by",
        "keep_answers",
        "mcp_messages",
        "mcp_tool_calls",
        "turns",
    )

    def __init__(self, *, usage: bool = True, keep_answers: bool = False) -> None:
        self._usage = usage
        self.keep_answers = keep_answers
        #: How many turns (audited requests) were fed.
        self.turns = 0
        #: How many tool calls got their result in a later request.
        self.answered = 0
        self._lowered: dict[int, EvidenceCoverage] = {}
        self._open: set[int] = set()
        #: The calls awaiting their result, as (turn, position of the call in
        #: its response, label, whether it names an MCP tool).
        self._calls: ToolPairing[tuple[int, int, str, bool]] = ToolPairing()
        self._own = EvidenceCoverage()
        self._reported: list[SessionStatus] = []
        #: ``(turn, position of the call)`` -> the request that answered it.
        self.answers: dict[tuple[int, int], Answer] = {}
        #: MCP audit lines fed, and ``tools/call`` executions among them (each
        #: once: retries continue theirs).
        self.mcp_messages = 0
        self.mcp_tool_calls = 0
        #: Model calls awaiting their MCP execution, as ``(turn, position)``,
        #: and executions awaiting their model call, as their ``seq``.
        self._executions: ExecutionPairing[tuple[int, int] | int] = ExecutionPairing()
        #: Calls still awaiting their result that an execution ran: its
        #: ``seq`` and whether its answer was read whole.
        self._call_execution: dict[tuple[int, int], tuple[int, bool]] = {}
        #: Executions whose answer has not been read whole: ``seq`` -> the call
        #: they ran (``None``: none yet). Bounded, oldest forgotten.
        self._unanswered: OrderedDict[int, tuple[int, int] | None] = OrderedDict()
        #: Executions no model call asked for (yet): ``seq`` -> the reason that says so.
        self._unasked: OrderedDict[int, str] = OrderedDict()
        #: An ``input_required`` retry's ``seq`` -> the execution it continues.
        self._continues: OrderedDict[int, int] = OrderedDict()
        #: ``(turn, position)`` -> the ``seq`` of the execution that ran it
        #: (kept with ``keep_answers``: readers show it).
        self.executed_by: dict[tuple[int, int], int] = {}

    # ------------------------------------------------------------ feeding

    def request(self, record: AuditRecord) -> int:
        """Take in an audited request: a new turn, awaiting its response.

        Args:
            record: its audit record.

        Returns:
            The turn's index (0-based, in the order fed).
        """
        turn = self.turns
        self.turns += 1
        self._open.add(turn)
        answers = self._calls.answer(record.tool_results)
        self.answered += len(answers)
        for (call_turn, position, _label, _mcp), size in answers:
            # Complete from the result side: what its execution did is no longer
            # needed, and a call no execution ran by now ran elsewhere (a local
            # tool): it stops waiting, so its arguments are not kept.
            if self._call_execution.pop((call_turn, position), None) is None:
                self._executions.withdraw((call_turn, position))
            if self.keep_answers:
                self.answers[(call_turn, position)] = Answer(turn, size)
        return turn

    def response(self, turn: int, event: ResponseEvent) -> None:
        """Take in the (first) response event of ``turn``.

        Args:
            turn: an index returned by :meth:`request`.
            event: the response.
        """
        self._open.discard(turn)
        if not event.evidence_complete:
            if never_answered(event):
                # The error event that says why lowers ``status``: said once.
                reason = NO_ANSWER
            elif is_error_answer(event) and event.capture_errors:
                # An error answer was seen whole: what it said, not "not seen completely".
                reason = ", ".join(event.capture_errors)
            else:
                # ", " inside: "; " separates whole reasons when a channel is rendered.
                detail = ", ".join(event.capture_errors) or "no reason recorded"
                reason = f"response not seen completely ({detail})"
            self.lower_turn(turn, "events", "partial", reason)
            self.lower_turn(turn, "actions", "partial", reason)
        if self._usage:
            self._usage_of(turn, event)
        for position, call in enumerate(event.tool_calls):
            label = qualified_tool_name(call) or "(unnamed)"
            mcp = named_as_mcp_tool(call.name, call.namespace)
            self._calls.asked(call.call_id, (turn, position, label, mcp))
            # An execution already seen (an agent that runs a call as soon as it streamed).
            seq = self._executions.asked(call, (turn, position))
            if isinstance(seq, int):
                self._ran(seq, (turn, position))

    def mcp_call(self, record: McpAuditRecord) -> None:
        """Take in an MCP audit line: a ``tools/call`` that begins an execution
        is paired with the model call it runs (:mod:`modeltap.evidence.mcp_pairing`);
        an ``input_required`` retry continues its execution; anything else is
        no tool execution.

        Args:
            record: the line, as written (before its message was forwarded).
        """
        self.mcp_messages += 1
        if record.continues_seq is not None:
            root = self._continues.get(record.continues_seq, record.continues_seq)
            _bounded_put(self._continues, record.seq, root)
            return
        if not starts_execution(record):
            return
        self.mcp_tool_calls += 1
        _bounded_put(self._unanswered, record.seq, None)
        execution = execution_of(record)
        call = self._executions.executed(execution, record.seq)
        if isinstance(call, tuple):
            self._ran(record.seq, call)
        else:
            # The model asked for that tool with other arguments: say which call.
            differs = self._executions.same_tool(execution)
            _bounded_put(
                self._unasked,
                record.seq,
                unasked_execution(
                    f"{record.tool_name} on {record.mcp_server}",
                    record.seq,
                    None if differs is None else qualified_tool_name(differs) or "(unnamed)",
                    None if differs is None else differs.call_id,
                ),
            )

    def mcp_result(self, event: McpResultEvent) -> None:
        """Take in an ``mcp_result``: the answer that ends an execution (one
        read whole, that asks for no more input) completes it."""
        if event.seq is None or not event.evidence_complete:
            return
        if event.result_type == INPUT_REQUIRED:
            return  # the client retries; that retry's answer ends the execution
        seq = self._continues.pop(event.seq, event.seq)
        if seq not in self._unanswered:
            return
        call = self._unanswered.pop(seq)
        if call is not None and call in self._call_execution:
            self._call_execution[call] = (seq, True)

    def _ran(self, seq: int, call: tuple[int, int]) -> None:
        """Execution ``seq`` ran the model's ``call``."""
        self._unasked.pop(seq, None)
        answered = seq not in self._unanswered
        if not answered:
            self._unanswered[seq] = call
        self._call_execution[call] = (seq, answered)
        if self.keep_answers:
            self.executed_by[call] = seq

    def _usage_of(self, turn: int, event: ResponseEvent) -> None:
        """Lower ``usage`` by what the response's wire could have reported and did not."""
        carried = reported_usage(event.api)
        missing = [name for name in carried if getattr(event.usage, name) is None]
        if missing and len(missing) == len(carried):
            self.lower_turn(turn, "usage", "unavailable", no_usage_reason(event))
        elif missing:
            self.lower_turn(turn, "usage", "partial", f"not reported: {', '.join(missing)}")

    def turn_error(self, turn: int, event: ErrorEvent) -> None:
        """Take in an ``error`` event that names ``turn``'s request."""
        self.lower_turn(turn, "status", "partial", f"error event: {event.error}: {event.message}")

    def refused(self, event: RejectedEvent) -> None:
        """Take in a refusal (a refused request has no audit record, so no turn)."""
        self.lower("status", "partial", refusal_text(event.rule, event.message))

    def error(self, event: ErrorEvent) -> None:
        """Take in an ``error`` event that belongs to no turn."""
        self.lower("status", "partial", f"error event: {event.error}: {event.message}")

    def file_reopened(self, file: str) -> None:
        """Take in that ``file`` was moved or deleted while it held lines of this
        session (a ``file_reopened`` event with ``lost_lines``): ``data`` is partial.

        Args:
            file: the file's name.
        """
        self.lower("data", "partial", file_moved_reason(file))

    def lower(self, channel: str, status: CoverageStatus, reason: str) -> None:
        """Lower a channel of the session itself (outside any turn)."""
        self._own = self._own.lower(channel, status, reason)

    def lower_turn(self, turn: int, channel: str, status: CoverageStatus, reason: str) -> None:
        """Lower a channel of one turn."""
        self._lowered[turn] = self._lowered.get(turn, COMPLETE).lower(channel, status, reason)

    def reported(self, end: SessionStatus) -> None:
        """Take in what the proxy said when the session ended (readers only).

        A reason of an incomplete ``sessions.jsonl`` line that the lines
        themselves do not give (the same fold computed it, so the same words)
        lowers ``events`` as ``the proxy reported: ...``.
        """
        self._reported.append(end)

    def _tool_side(self, execution: tuple[int, bool] | None, *, mcp: bool) -> str:
        """What the tool side says of a call whose result never came back."""
        if execution is not None:
            return f"; its MCP execution (seq {execution[0]}) has no answer read whole"
        if self.mcp_tool_calls:
            return NOT_EXECUTED_ON_MCP
        return NO_MCP_SEEN if mcp else ""

    def _mcp_only(self, own: EvidenceCoverage) -> EvidenceCoverage:
        """A session with MCP traffic and no model request, judged for what it
        is: its MCP lines are evidence (``events`` partial only for an
        execution whose answer was not read whole, ``status`` as its
        refusals and errors say), but no observed model call asked for its
        executions, so ``actions`` is unavailable (and ``usage``: no model
        turn reported any). Never "audit unsupported": MCP was audited."""
        if self._unanswered:
            seqs = ", ".join(str(seq) for seq in self._unanswered)
            own = own.lower(
                "events", "partial", f"MCP tools/call without an answer read whole (seq {seqs})"
            )
        own = own.lower("actions", "unavailable", mcp_only(self.mcp_messages, self.mcp_tool_calls))
        return own.lower("usage", "unavailable", NO_MODEL_REQUEST)

    # ------------------------------------------------------------ reading

    def result(self, open_reason: str = NO_RESPONSE) -> SessionCoverage:
        """The coverage as of now.

        Args:
            open_reason: why a request without a response has none (readers:
                no response was recorded; the proxy: none had been seen yet).

        Returns:
            Per turn, the session's own, combined, and ``capture_errors``.
        """
        turns = dict(self._lowered)
        for turn in self._open:
            coverage = turns.get(turn, COMPLETE)
            coverage = coverage.lower("events", "partial", open_reason)
            coverage = coverage.lower("actions", "partial", open_reason)
            if self._usage:
                coverage = coverage.lower("usage", "unavailable", open_reason)
            turns[turn] = coverage.lower("status", "partial", open_reason)
        for call_id, (turn, position, label, mcp) in self._calls.waiting():
            execution = self._call_execution.get((turn, position))
            if execution is not None and execution[1]:
                continue  # complete from the tool side: its MCP execution was seen whole
            reason = (
                f"tool call {label} has no call_id and no later request's results "
                "matched it by position"
                if call_id is None
                else f"tool call {label} ({call_id}) got no result in a later request"
            )
            turns[turn] = turns.get(turn, COMPLETE).lower(
                "actions", "partial", f"{reason}{self._tool_side(execution, mcp=mcp)}"
            )
        ordered = sorted(turns.items())
        own = self._own
        if self.turns == 0 and self.mcp_messages:
            own = self._mcp_only(own)
        elif self.turns == 0:
            for name in ("events", "actions", "usage", "status"):
                own = own.lower(name, "unavailable", NO_REQUESTS)
        else:
            for reason in self._unasked.values():
                own = own.lower("actions", "partial", reason)
        errors = session_capture_errors(ordered, own)
        for end in self._reported:
            if end.evidence_complete is not False:
                continue
            for reason in end.capture_errors or ("the session's evidence is incomplete",):
                if reason not in errors:
                    own = own.lower("events", "partial", PROXY_REPORTED + reason)
        if self._reported:
            errors = session_capture_errors(ordered, own)
        return SessionCoverage(
            turns=turns,
            own=own,
            coverage=merge(worst_of_turns(ordered, self.turns), own),
            capture_errors=errors,
        )


def _bounded_put[K, V](table: OrderedDict[K, V], key: K, value: V) -> None:
    """Put ``key`` in ``table``, forgetting the oldest past :data:`MAX_WAITING`."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > MAX_WAITING:
        table.popitem(last=False)
