"""The assertions of ``capture.expect``, ``session.expect`` and ``turn.expect`` (pure).

Each returns a :class:`~modeltap.evidence.verdicts.verdict.Verdict` by the
rule of ``seeds/002`` ("How coverage changes assertion results"):

* a **positive** assertion (a call was made, text was said, a model was
  used) that finds matching evidence passes whatever the coverage; one that
  finds none fails when its channel is complete, and is ``unavailable``
  otherwise: a collection gap cannot show that the agent did not act;
* a **negative** assertion (not called, only these tools, no tool errors)
  or an **upper bound** (at most N calls, tokens, cost) is judged only when
  its channel is complete, else ``unavailable``; but evidence that
  contradicts it fails it whatever the coverage (a seen call of a forbidden
  tool, a count already past its bound).

Channels: tool calls read ``actions``; usage and cost ``usage``; response
text ``messages``; completion ``status``; model, advertised tools and
instructions the audit records (every audited turn has one: ``data``, and
``unavailable`` when there is no audited request at all).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from modeltap.evidence.coverage import CHANNELS, ChannelCoverage, CoverageStatus
from modeltap.evidence.coverage_reasons import (
    MESSAGES_NOT_RECORDED,
    NO_REQUESTS,
    qualified_tool_name,
    tool_call_matches,
)
from modeltap.evidence.records import ToolCall
from modeltap.evidence.verdicts.match import (
    INVALID_JSON,
    Matcher,
    decode_arguments,
    describe,
    mismatch,
    require_json,
    to_json,
)
from modeltap.evidence.verdicts.scope import ExecutionFacts, Scope, TurnFacts
from modeltap.evidence.verdicts.verdict import (
    FAILED,
    PASSED,
    REMEDIES,
    UNAVAILABLE,
    Status,
    Verdict,
    Verdicts,
    verdicts,
)

__all__ = ["TOKEN_KINDS", "Expect"]

#: ``max_tokens(kind=...)``: which count is bounded.
TOKEN_KINDS: Final = ("input", "output", "total")
#: How many calls an unmatched reason goes through one by one.
_LISTED: Final = 5
#: How much of a final text a failed verdict quotes.
_QUOTED: Final = 200


#: Where an execution no model call asked for is said to be.
_UNASKED: Final = "no model call asked for it"


def _mcp_failure(execution: ExecutionFacts) -> str:
    """How an MCP execution failed, in words."""
    if execution.outcome == "error":
        return f"JSON-RPC error {execution.error_code}"
    if execution.outcome == "http_error":
        return "an HTTP error and no JSON-RPC answer"
    return "isError: true"


def _names(items: Iterable[str]) -> str:
    return "[" + ", ".join(repr(n) for n in items) + "]"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class Expect:
    """Assertions over one :class:`~modeltap.evidence.verdicts.scope.Scope`.

    Every method returns a :class:`Verdict`; none raises on what the
    evidence holds. Names are matched as ``tool_was_called`` matches them:
    the bare name, or ``namespace.name``.
    """

    __slots__ = ("_calls", "scope")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._calls: list[tuple[TurnFacts, ToolCall]] | None = None

    # ------------------------------------------------------------ plumbing

    def _verdict(
        self,
        status: Status,
        name: str,
        reason: str,
        channel: str | None,
        *,
        details: tuple[dict[str, Any], ...] | None = None,
        coverage: ChannelCoverage | None = None,
        hint: str | None = None,
    ) -> Verdict:
        if status == UNAVAILABLE and channel is not None:
            hint = hint or REMEDIES.get(channel.split("+")[0])
            lost = self.scope.coverage.data.reasons
            if coverage is not None and channel != "data":
                # Lost lines lowered it (_with_lost_lines): say what would bring them back.
                own = [r for r in coverage.reasons if r not in lost]
                if len(own) < len(coverage.reasons):
                    hint = f"{hint}, and {REMEDIES['data']}" if own and hint else REMEDIES["data"]
            if coverage is not None and coverage.status != "complete":
                reason = (
                    f"{reason}; the {channel} channel is {coverage.status}: "
                    f"{coverage.reason or 'no reason recorded'}"
                )
        return Verdict(
            status=status,
            name=name,
            reason=reason,
            channel=channel,
            details=details,
            scope=self.scope.label,
            hint=hint,
        )

    def _channel(self, name: str) -> ChannelCoverage:
        """A channel as the scope's verdicts read it.

        Beyond the scope's coverage: ``messages`` is what the turns' recorded
        output is worth (a capture's or session's own says only that content
        is not in the evidence files), ``status`` is partial while a session
        has not ended, and every channel is lowered by ``data``'s reasons: a
        line that was lost, cannot be read or links to no turn may hold what
        the channel needs (a response whose tool calls no turn shows).
        """
        if name == "data":
            return self._audit()
        channel = self._messages() if name == "messages" else self.scope.coverage.channel(name)
        if name == "status":
            open_sessions = self._open_sessions()
            if open_sessions:
                channel = channel.lower("partial", _not_ended(open_sessions))
        return _with_lost_lines(channel, self.scope.coverage.data)

    def _messages(self) -> ChannelCoverage:
        """The turns' ``messages`` channels as one: worst status, each reason once
        (naming its turns when not every turn gives it)."""
        turns = self.scope.turns
        if not turns:
            return ChannelCoverage("unavailable", (NO_REQUESTS,))
        by_reason: dict[str, tuple[CoverageStatus, list[str]]] = {}
        for turn in turns:
            channel = turn.coverage.messages
            for reason in channel.reasons:
                by_reason.setdefault(reason, (channel.status, []))[1].append(
                    self.scope.turn_label(turn)
                )
        merged = ChannelCoverage()
        for reason, (status, labels) in by_reason.items():
            if len(labels) < len(turns):
                shown = ", ".join(labels[:_LISTED]) + (
                    f" and {len(labels) - _LISTED} more" if len(labels) > _LISTED else ""
                )
                reason = f"{reason} ({shown})"
            merged = merged.lower(status, reason)
        return merged

    def _open_sessions(self) -> list[str]:
        return [s.session_id for s in self.scope.sessions if not s.ends]

    def _audit(self) -> ChannelCoverage:
        """What the audit records are worth: ``data``, none at all unavailable."""
        data = self.scope.coverage.data
        if not self.scope.turns:
            return data.lower("unavailable", NO_REQUESTS)
        return data

    def _positive(
        self,
        name: str,
        channel: str,
        found: str | None,
        missing: str,
        *,
        details: tuple[dict[str, Any], ...] | None = None,
        coverage: ChannelCoverage | None = None,
        hint: str | None = None,
    ) -> Verdict:
        """Found: passed. Not found: failed on a complete channel, else unavailable."""
        if found is not None:
            return self._verdict(PASSED, name, found, channel, details=details)
        coverage = coverage if coverage is not None else self._channel(channel)
        if coverage.status == "complete":
            return self._verdict(FAILED, name, missing, channel, details=details)
        return self._verdict(
            UNAVAILABLE, name, missing, channel, details=details, coverage=coverage, hint=hint
        )

    def _bounded(
        self,
        name: str,
        channel: str,
        contradiction: str | None,
        holds: str,
        *,
        coverage: ChannelCoverage | None = None,
    ) -> Verdict:
        """Contradicted: failed. Else passed on a complete channel, else unavailable."""
        if contradiction is not None:
            return self._verdict(FAILED, name, contradiction, channel)
        coverage = coverage if coverage is not None else self._channel(channel)
        if coverage.status == "complete":
            return self._verdict(PASSED, name, holds, channel)
        return self._verdict(UNAVAILABLE, name, holds, channel, coverage=coverage)

    @property
    def calls(self) -> list[tuple[TurnFacts, ToolCall]]:
        """The scope's tool calls in call order (a session's flattened over its turns):
        every call seen, a failed attempt's too (what the model asked for)."""
        if self._calls is None:
            self._calls = [(turn, call) for turn in self.scope.turns for call in turn.tool_calls]
        return self._calls

    def _counted(self) -> tuple[list[ToolCall], int]:
        """The calls a count or a budget counts, and how many it leaves out.

        An attempt that a later turn retried is left out: it failed (its
        stream cut, say, after a call had begun), the agent sent the same
        request again, and the retry's answer holds the call. Counting both
        would fail a budget on a call the agent never received. (Presence
        still sees it: a forbidden call the model began is a call it made.)
        """
        retried = {
            (turn.record.session_id, turn.retry_of)
            for turn in self.scope.turns
            if turn.retry_of is not None
        }
        counted = [
            call for turn, call in self.calls if (turn.record.session_id, turn.index) not in retried
        ]
        return counted, len(self.calls) - len(counted)

    def _call_label(self, index: int) -> str:
        turn, call = self.calls[index]
        return f"call {index} ({call.name} at {self.scope.turn_label(turn)})"

    def _seen(self) -> str:
        names = [call.name or "(unnamed)" for _, call in self.calls]
        if not names:
            return "no tool call was seen"
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
        return f"calls seen: {shown}"

    # ------------------------------------------------------------ tool calls

    def tool_called(self, name: str, /, **args: Any) -> Verdict:
        """A call of ``name`` whose arguments match every given matcher.

        Args:
            name: the tool, bare or ``namespace.name``.
            args: argument name -> plain value or :mod:`modeltap.match`
                matcher; arguments not named are not looked at.

        Returns:
            The verdict; ``details`` holds one entry (``expected_tool``,
            ``args_asserted``, ``matched_call_index``, ``unmatched_reason``).

        Raises:
            ValueError: an expected value holds NaN or an infinity (no JSON
                argument is one: it could never match).
        """
        for value in args.values():
            require_json(value)
        shown_args = ", ".join(f"{k}={describe(v)}" for k, v in args.items())
        verdict_name = f"tool_called({name!r}{', ' + shown_args if shown_args else ''})"
        matched = -1
        why: list[str] = []
        candidates = 0
        for index, (_turn, call) in enumerate(self.calls):
            if not tool_call_matches(call, name):
                continue
            candidates += 1
            problem = _arguments_mismatch(call, args)
            if problem is None:
                matched = index
                break
            why.append(f"call {index}: {problem}")
        if matched >= 0:
            unmatched = None
        elif not candidates:
            unmatched = f"no call to {name!r} found ({self._seen()})"
        else:
            listed = why[:_LISTED]
            more = f"; and {candidates - _LISTED} more" if candidates > _LISTED else ""
            unmatched = "; ".join(listed) + more
        details = (
            {
                "expected_tool": name,
                "args_asserted": to_json(args),
                "matched_call_index": matched,
                "unmatched_reason": unmatched,
            },
        )
        found = f"found {self._call_label(matched)}" if matched >= 0 else None
        expected = f"expected a call of {name!r}" + (f" with {shown_args}" if shown_args else "")
        return self._positive(
            verdict_name, "actions", found, f"{expected}; {unmatched}", details=details
        )

    def tool_not_called(self, name: str) -> Verdict:
        """No call of ``name`` (judged only on complete ``actions``)."""
        seen = [i for i, (_, call) in enumerate(self.calls) if tool_call_matches(call, name)]
        contradiction = (
            f"expected no call of {name!r}; found {_plural(len(seen), 'call')}: "
            + ", ".join(self._call_label(i) for i in seen[:_LISTED])
            if seen
            else None
        )
        return self._bounded(
            f"tool_not_called({name!r})",
            "actions",
            contradiction,
            f"no call of {name!r} was seen",
        )

    def tool_call_count(
        self,
        name: str,
        *,
        exactly: int | None = None,
        at_least: int | None = None,
        at_most: int | None = None,
    ) -> Verdict:
        """How many calls of ``name`` were made, against the bounds given.

        Raises:
            ValueError: no bound was given, a bound is negative, or no count
                meets them all (``at_least=3, at_most=2``).
        """
        bounds = {"exactly": exactly, "at_least": at_least, "at_most": at_most}
        given = {k: v for k, v in bounds.items() if v is not None}
        if not given:
            raise ValueError("tool_call_count() needs exactly=, at_least= or at_most=")
        if any(v < 0 for v in given.values()):
            raise ValueError("tool_call_count() bounds must not be negative")
        ceiling = min((v for k, v in given.items() if k in ("exactly", "at_most")), default=None)
        floor = max((v for k, v in given.items() if k in ("exactly", "at_least")), default=0)
        if ceiling is not None and floor > ceiling:
            raise ValueError(
                f"tool_call_count(): no count is at least {floor} and at most {ceiling}"
            )
        verdict_name = f"tool_call_count({name!r}, " + ", ".join(
            f"{k}={v}" for k, v in given.items()
        )
        verdict_name += ")"
        counted, _ = self._counted()
        count = sum(1 for call in counted if tool_call_matches(call, name))
        left_out = sum(1 for _, call in self.calls if tool_call_matches(call, name)) - count
        said = f"{_plural(count, 'call')} of {name!r} seen" + _retried(left_out)
        if ceiling is not None and count > ceiling:
            return self._verdict(
                FAILED, verdict_name, f"{said}, more than {ceiling} allowed", "actions"
            )
        coverage = self._channel("actions")
        if coverage.status == "complete":
            if count < floor:
                return self._verdict(
                    FAILED, verdict_name, f"{said}, fewer than {floor} expected", "actions"
                )
            return self._verdict(PASSED, verdict_name, said, "actions")
        if ceiling is None and count >= floor:
            return self._verdict(PASSED, verdict_name, said, "actions")
        return self._verdict(UNAVAILABLE, verdict_name, said, "actions", coverage=coverage)

    def tools_in_order(self, names: Sequence[str]) -> Verdict:
        """Calls of ``names`` in this order, other calls between them allowed."""
        wanted = list(names)
        verdict_name = f"tools_in_order({_names(wanted)})"
        at: list[int] = []
        position = 0
        for index, (_, call) in enumerate(self.calls):
            if position < len(wanted) and tool_call_matches(call, wanted[position]):
                at.append(index)
                position += 1
        found = (
            f"found in order at calls {', '.join(map(str, at))}"
            if position == len(wanted)
            else None
        )
        missing = (
            f"expected {_names(wanted)} in this order (gaps allowed); "
            f"matched {position} of {len(wanted)}; {self._seen()}"
        )
        return self._positive(verdict_name, "actions", found, missing)

    def only_tools(self, names: Sequence[str]) -> Verdict:
        """No call of a tool outside ``names`` (judged only on complete ``actions``)."""
        allowed = list(names)
        outside = [
            i
            for i, (_, call) in enumerate(self.calls)
            if not any(tool_call_matches(call, n) for n in allowed)
        ]
        contradiction = (
            f"called tools outside {_names(allowed)}: "
            + ", ".join(self._call_label(i) for i in outside[:_LISTED])
            if outside
            else None
        )
        return self._bounded(
            f"only_tools({_names(allowed)})",
            "actions",
            contradiction,
            f"every call seen is one of {_names(allowed)} ({self._seen()})",
        )

    def max_tool_calls(self, n: int) -> Verdict:
        """At most ``n`` tool calls in all (judged only on complete ``actions``).

        Raises:
            ValueError: ``n`` is not a whole number, 0 or more.
        """
        _whole(n, "max_tool_calls")
        counted, left_out = self._counted()
        count = len(counted)
        said = f"{_plural(count, 'tool call')} seen" + _retried(left_out)
        contradiction = f"{said}, more than the {n} allowed" if count > n else None
        return self._bounded(f"max_tool_calls({n})", "actions", contradiction, said)

    def no_tool_errors(self) -> Verdict:
        """No tool came back failed.

        Judged on what flags a failure: the MCP execution that ran a call
        (``isError: true``, a JSON-RPC error, an HTTP error: SPEC 3b), and
        the results the scope's requests carried back on the wires whose
        results carry an error flag (Anthropic's ``is_error``, Bedrock's
        ``status: "error"``). A result without a flag (OpenAI, Gemini) whose
        call no observed MCP execution ran, or an execution whose answer was
        not seen, makes it unavailable, saying so. It reads the ``actions``
        channel too (a call without its result or its execution could have
        failed). Executions no model call asked for count in a session's (or
        the capture's) scope.
        """
        verdict_name = "no_tool_errors()"
        failed: list[str] = []
        unflagged: dict[str, int] = {}
        unanswered: list[str] = []
        count = 0
        judged: set[tuple[str, int]] = set()

        def executed(execution: ExecutionFacts, session_id: str, where: str) -> None:
            # Each execution once, however many of the scope's turns show it.
            nonlocal count
            if (session_id, execution.seq) in judged:
                return
            judged.add((session_id, execution.seq))
            count += 1
            said = (
                f"{execution.tool} on MCP server {execution.server} (seq {execution.seq}, {where})"
            )
            if execution.failed is True:
                failed.append(f"{said}: {_mcp_failure(execution)}")
            elif execution.failed is None and where == _UNASKED:
                unanswered.append(said)

        seen: set[str] = set()
        for turn in self.scope.turns:
            session_id = turn.record.session_id
            for inv in turn.tool_invocations:
                if inv.execution is not None:
                    label = qualified_tool_name(inv.call) or "(unnamed)"
                    executed(inv.execution, session_id, f"{label}, {self.scope.turn_label(turn)}")
            ran = {
                inv.call.call_id: inv.execution
                for inv in turn.results_of
                if inv.call.call_id is not None and inv.execution is not None
            }
            for result in turn.record.tool_results:
                if result.call_id is not None:
                    if result.call_id in seen:
                        continue  # the history sent again: one result, counted once
                    seen.add(result.call_id)
                execution = ran.get(result.call_id) if result.call_id is not None else None
                if execution is not None:
                    executed(execution, session_id, f"sent back in {self.scope.turn_label(turn)}")
                if result.is_error is True:
                    count += 1
                    failed.append(f"{result.call_id} (sent back in {self.scope.turn_label(turn)})")
                elif execution is not None and execution.failed is not None:
                    continue  # its execution said how it went
                elif result.is_error is None:
                    count += 1
                    unflagged[turn.record.api] = unflagged.get(turn.record.api, 0) + 1
                else:
                    count += 1
        for session in self.scope.sessions:
            for unasked in session.unasked_executions:
                executed(unasked, session.session_id, _UNASKED)
        if failed:
            return self._verdict(
                FAILED,
                verdict_name,
                f"{_plural(len(failed), 'tool result')} came back marked an error: "
                + ", ".join(failed[:_LISTED]),
                "actions",
            )
        said = f"no error flag set on {_plural(count, 'tool result')}"
        if unanswered:
            return self._verdict(
                UNAVAILABLE,
                verdict_name,
                f"{said}, but {_plural(len(unanswered), 'MCP execution')} had no answer seen: "
                + ", ".join(unanswered[:_LISTED]),
                "actions",
                hint="the MCP server's answers on the proxy's --mcp mount",
            )
        if unflagged:
            wires = ", ".join(f"{api} ({_plural(n, 'result')})" for api, n in unflagged.items())
            return self._verdict(
                UNAVAILABLE,
                verdict_name,
                f"{said}, but the tool results of {wires} carry no error flag on the wire "
                "and no MCP execution of theirs was seen: a failed tool cannot be told "
                "from one that worked",
                "actions",
                hint="tool results on a wire that flags errors (Anthropic's is_error, "
                "Bedrock's status: \"error\"), or the tools' MCP server mounted with --mcp "
                "(MCP's isError)",
            )
        return self._bounded(verdict_name, "actions", None, said)

    # ------------------------------------------------------------ text

    def final_text_contains(self, text: str, *, case_sensitive: bool = False) -> Verdict:
        """The last response's output text contains ``text``.

        It reads the ``messages`` channel: content, so only from a recording
        (``Capture.load(DIR, record=RDIR)``, ``--record RDIR``); without one
        the verdict is unavailable and says how to get it.
        """
        verdict_name = f"final_text_contains({text!r}" + (
            ", case_sensitive=True)" if case_sensitive else ")"
        )
        turns = self.scope.turns
        if not turns:
            coverage = ChannelCoverage("unavailable", (NO_REQUESTS,))
            return self._positive(
                verdict_name, "messages", None, "no turn to read", coverage=coverage
            )
        last = max(turns, key=_order)
        where = f"the final text ({self.scope.turn_label(last)})"
        status = _error_status(last)
        if status is not None:
            return self._verdict(
                FAILED,
                verdict_name,
                f"expected {text!r} in {where}; the final response "
                f"({self.scope.turn_label(last)}) is an error answer (HTTP {status}), "
                "which holds no text",
                "messages",
            )
        coverage = _with_lost_lines(last.coverage.messages, self.scope.coverage.data)
        hint = (
            None
            if MESSAGES_NOT_RECORDED in coverage.reasons
            else "a recording that holds this turn's response, seen to its end"
        )
        said = last.output_text
        if said is None:
            return self._positive(
                verdict_name,
                "messages",
                None,
                f"{where} was not read",
                coverage=coverage,
                hint=hint,
            )
        haystack, needle = (said, text) if case_sensitive else (said.casefold(), text.casefold())
        if needle in haystack:
            return self._verdict(PASSED, verdict_name, f"found in {where}", "messages")
        quoted = said if len(said) <= _QUOTED else said[:_QUOTED] + "..."
        return self._positive(
            verdict_name,
            "messages",
            None,
            f"expected {text!r} in {where}; it says {quoted!r}",
            coverage=coverage,
            hint=hint,
        )

    # ------------------------------------------------------------ audit records

    def model_used(self, name: str) -> Verdict:
        """A request asked for model ``name`` (the audit record's ``model``)."""
        used = [t for t in self.scope.turns if t.record.model == name]
        found = f"{self.scope.turn_label(used[0])} asked for {name!r}" if used else None
        return self._positive(
            f"model_used({name!r})",
            "data",
            found,
            f"no request asked for {name!r} (models used: {_names(self._models())})",
        )

    def _models(self) -> list[str]:
        return list(dict.fromkeys(t.record.model for t in self.scope.turns))

    def only_models(self, names: Sequence[str]) -> Verdict:
        """Every request asked for one of ``names``."""
        allowed = list(names)
        outside = [t for t in self.scope.turns if t.record.model not in allowed]
        contradiction = (
            f"requests asked for models outside {_names(allowed)}: "
            + ", ".join(
                f"{self.scope.turn_label(t)}: {t.record.model!r}" for t in outside[:_LISTED]
            )
            if outside
            else None
        )
        return self._bounded(
            f"only_models({_names(allowed)})",
            "data",
            contradiction,
            f"models used: {_names(self._models())}",
        )

    def tools_advertised(
        self, includes: Sequence[str] = (), excludes: Sequence[str] = ()
    ) -> Verdict:
        """Tools the requests advertised: each of ``includes`` in some request,
        none of ``excludes`` in any (a continuation that did not state its
        tools leaves them unknown)."""
        parts = []
        if includes:
            parts.append(f"includes={_names(includes)}")
        if excludes:
            parts.append(f"excludes={_names(excludes)}")
        verdict_name = f"tools_advertised({', '.join(parts)})"
        advertised: dict[str, None] = {}
        unknown = []
        for turn in self.scope.turns:
            if turn.record.tool_names is None:
                unknown.append(self.scope.turn_label(turn))
            for tool in turn.record.tool_names or ():
                advertised.setdefault(tool, None)
        coverage = self._audit()
        if unknown:
            coverage = coverage.lower(
                "partial",
                f"{', '.join(unknown)} did not state {'its' if len(unknown) == 1 else 'their'} "
                "tools (a continuation of server-held state)",
            )
        said = f"advertised: {_names(advertised)}"
        banned = [tool for tool in excludes if tool in advertised]
        if banned:
            return self._verdict(
                FAILED, verdict_name, f"{_names(banned)} advertised; {said}", "data"
            )
        missing = [tool for tool in includes if tool not in advertised]
        if missing:
            return self._positive(
                verdict_name,
                "data",
                None,
                f"{_names(missing)} never advertised; {said}",
                coverage=coverage,
            )
        if not excludes:
            return self._verdict(PASSED, verdict_name, said, "data")
        return self._bounded(verdict_name, "data", None, said, coverage=coverage)

    def instructions_unchanged(self) -> Verdict:
        """Every request sent the same instructions (``instructions_sha256``)."""
        verdict_name = "instructions_unchanged()"
        first: TurnFacts | None = None
        unknown = []
        for turn in self.scope.turns:
            sha = turn.record.instructions_sha256
            if sha is None:
                unknown.append(self.scope.turn_label(turn))
                continue
            if first is None:
                first = turn
            elif sha != first.record.instructions_sha256:
                changed = _changed_parts(first, turn)
                return self._verdict(
                    FAILED,
                    verdict_name,
                    f"the instructions of {self.scope.turn_label(turn)} differ from those of "
                    f"{self.scope.turn_label(first)}{changed}",
                    "data",
                )
        coverage = self._audit()
        if unknown:
            coverage = coverage.lower(
                "partial",
                f"{', '.join(unknown)} did not state {'its' if len(unknown) == 1 else 'their'} "
                "instructions (a continuation of server-held state)",
            )
        if first is None and self.scope.turns:
            coverage = coverage.lower("unavailable", "no request stated its instructions")
        count = len(self.scope.turns) - len(unknown)
        return self._bounded(
            verdict_name,
            "data",
            None,
            f"{_plural(count, 'request')} sent the same instructions",
            coverage=coverage,
        )

    # ------------------------------------------------------------ usage and cost

    def max_tokens(self, n: int, *, kind: str = "total") -> Verdict:
        """At most ``n`` tokens of ``kind`` (``input``, ``output``, ``total``) in all.

        A turn counts once its response was seen whole and reported the
        count; a total is the reported one, or the sum of the parts on a
        wire that reports none (Anthropic). Known counts already past ``n``
        fail it whatever the rest.

        Raises:
            ValueError: ``kind`` is not one of :data:`TOKEN_KINDS`, or ``n`` is
                not a whole number, 0 or more.
        """
        if kind not in TOKEN_KINDS:
            raise ValueError(f"max_tokens(kind=...) is one of {', '.join(TOKEN_KINDS)}")
        _whole(n, "max_tokens")
        verdict_name = f"max_tokens({n}" + (f", kind={kind!r})" if kind != "total" else ")")
        known = 0
        unknown: list[str] = []
        for turn in self.scope.turns:
            value = _tokens(turn, kind)
            if value is None or turn.coverage.events.status != "complete":
                unknown.append(self.scope.turn_label(turn))
            if value is not None:
                known += value
        noun = "tokens" if kind == "total" else f"{kind} tokens"
        if known > n:
            return self._verdict(
                FAILED, verdict_name, f"{known} {noun} counted, more than the {n} allowed", "usage"
            )
        coverage = self._audit()
        if unknown:
            coverage = coverage.lower(
                "partial",
                f"{kind} tokens unknown for {', '.join(unknown[:_LISTED])}"
                + (f" and {len(unknown) - _LISTED} more" if len(unknown) > _LISTED else ""),
            )
            coverage = _with_usage_reasons(coverage, self.scope.coverage.usage)
        return self._bounded(
            verdict_name, "usage", None, f"{known} {noun} counted", coverage=coverage
        )

    def max_cost(self, usd: float) -> Verdict:
        """At most ``usd`` US dollars by modeltap's estimate (an estimate, never a bill).

        A turn nobody can price (unknown model, an unreported count) leaves
        the verdict unavailable, naming its model.

        Raises:
            ValueError: ``usd`` is not a finite number, 0 or more (a NaN
                bound would pass any cost).
        """
        if isinstance(usd, bool) or not isinstance(usd, int | float) or not 0 <= usd < math.inf:
            raise ValueError("max_cost() takes a finite number of US dollars, 0 or more")
        verdict_name = f"max_cost({usd!r})"
        known = 0.0
        priced = 0
        unpriced: dict[tuple[str, str], list[str]] = {}
        for turn in self.scope.turns:
            cost = turn.cost
            if cost is None or cost.estimate_usd is None:
                note = cost.note if cost is not None and cost.note else "no estimate"
                unpriced.setdefault((turn.record.model, note), []).append(
                    self.scope.turn_label(turn)
                )
            else:
                priced += 1
                known += cost.estimate_usd
        said = f"estimated ${known:.6f}"
        if unpriced:
            said += f" for the {priced} of {len(self.scope.turns)} turns that could be priced"
        if known > usd:
            return self._verdict(FAILED, verdict_name, f"{said}, more than ${usd}", "usage")
        coverage = self._audit()
        if unpriced:
            groups = [
                f"{_plural(len(labels), 'turn')} of model {model!r} ({note}"
                + (f": {labels[0]}" if len(labels) == 1 else f": {labels[0]}, ...")
                + ")"
                for (model, note), labels in unpriced.items()
            ]
            coverage = coverage.lower(
                "unavailable", "could not be priced: " + "; ".join(groups[:_LISTED])
            )
        return self._bounded(verdict_name, "usage", None, said, coverage=coverage)

    # ------------------------------------------------------------ status

    def completed(self) -> Verdict:
        """The scope ran to completion: every session ended with ``stop_reason:
        completed`` and complete evidence (a turn: answered in full, no error)."""
        verdict_name = "completed()"
        if not self.scope.sessions:
            return self._turns_completed(verdict_name)
        stopped: list[str] = []
        open_sessions: list[str] = []
        for session in self.scope.sessions:
            reasons = [e.stop_reason for e in session.ends if e.stop_reason != "completed"]
            if reasons:
                why = ", ".join(map(str, dict.fromkeys(reasons)))
                said = "; ".join(session.coverage.status.reasons[:_LISTED])
                stopped.append(
                    f"session {session.session_id!r} stopped with {why}"
                    + (f" ({said})" if said else "")
                )
            elif not session.ends:
                open_sessions.append(session.session_id)
        # The proxy's stop reason is `completed` after an error answer (the
        # upstream answered): a session whose last request failed did not.
        last_of: dict[str, TurnFacts] = {}
        for turn in self.scope.turns:
            last_of[turn.record.session_id] = _later(last_of.get(turn.record.session_id), turn)
        for session in self.scope.sessions:
            last = last_of.get(session.session_id)
            status = _error_status(last)
            if last is not None and status is not None:
                stopped.append(
                    f"session {session.session_id!r}'s last request "
                    f"({self.scope.turn_label(last)}) was answered HTTP {status}"
                )
        if stopped:
            return self._verdict(FAILED, verdict_name, "; ".join(stopped), "status")
        coverage = _evidence_coverage(self.scope.coverage)
        if open_sessions:
            coverage = coverage.lower("partial", _not_ended(open_sessions))
        return self._positive(
            verdict_name,
            "status",
            "every session completed with complete evidence"
            if coverage.status == "complete"
            else None,
            "the sessions' completion is not shown",
            coverage=coverage,
        )

    def _turns_completed(self, verdict_name: str) -> Verdict:
        broken = []
        for turn in self.scope.turns:
            label = self.scope.turn_label(turn)
            if turn.error_events:
                broken.append(f"{label}: {turn.error_events[0].error}")
            elif (status := _error_status(turn)) is not None:
                broken.append(f"{label}: upstream answered HTTP {status}")
        if broken:
            return self._verdict(FAILED, verdict_name, "; ".join(broken), "status")
        coverage = _evidence_coverage(self.scope.coverage)
        if not self.scope.turns:
            coverage = coverage.lower("unavailable", NO_REQUESTS)
        return self._positive(
            verdict_name,
            "status",
            "answered in full" if coverage.status == "complete" else None,
            "the answer was not seen in full",
            coverage=coverage,
        )

    # ------------------------------------------------------------ your own

    def that(
        self,
        fn: Callable[[Any], str | None],
        *,
        needs: Sequence[str] = (),
        name: str | None = None,
    ) -> Verdict:
        """Your own check: ``fn(scope)`` returns ``None`` or a failure text.

        A failure text fails it; ``None`` passes it only when every channel in
        ``needs`` is complete, else it is unavailable (``fn`` could not see
        what was never collected).

        Args:
            fn: called with the Capture, Session or Turn.
            needs: the channels ``fn`` reads (:data:`~modeltap.evidence.coverage.CHANNELS`).
            name: how the verdict names it (default: ``that(<fn's name>)``).

        Raises:
            ValueError: ``needs`` names an unknown channel.
            TypeError: ``fn`` returned something else than ``None`` or a string.
        """
        wrong = [c for c in needs if c not in CHANNELS]
        if wrong:
            raise ValueError(f"that(needs=...) names unknown channels {wrong}; known: {CHANNELS}")
        verdict_name = name or f"that({getattr(fn, '__name__', 'check')})"
        channel = "+".join(needs) or None
        result = fn(self.scope.target)
        if result is not None and not isinstance(result, str):
            raise TypeError(
                f"that(): {verdict_name} returned {type(result).__name__}; return None "
                "(no problem found) or a failure text"
            )
        if result is not None:
            return self._verdict(FAILED, verdict_name, result, channel)
        for needed in needs:
            coverage = self._channel(needed)
            if coverage.status != "complete":
                return self._verdict(
                    UNAVAILABLE, verdict_name, "no problem found", needed, coverage=coverage
                )
        return self._verdict(PASSED, verdict_name, "no problem found", channel)

    # ------------------------------------------------------------ roll-up

    def all(self, *items: Verdict | Verdicts) -> Verdicts:
        """Roll verdicts up (:func:`modeltap.verdicts`), named after this scope."""
        return verdicts(*items, name=self.scope.label)


def _arguments_mismatch(call: ToolCall, args: dict[str, Any]) -> str | None:
    """Why a call's arguments do not match ``args``, or ``None``."""
    if not args:
        return None
    decoded = decode_arguments(call.arguments)
    if decoded is INVALID_JSON:
        if all(isinstance(v, Matcher) and v.describe() == "anything()" for v in args.values()):
            return None
        what = "were not recorded" if call.arguments is None else "are not valid JSON"
        return f"the call's arguments {what} (only anything() matches them)"
    if not isinstance(decoded, dict):
        return "the call's arguments are not a JSON object"
    for key, expected in args.items():
        if key not in decoded:
            return f"arg {key!r} missing (arguments: {', '.join(map(repr, decoded)) or 'none'})"
        problem = mismatch(expected, decoded[key], f"arg {key!r}")
        if problem is not None:
            return problem
    return None


def _changed_parts(first: TurnFacts, later: TurnFacts) -> str:
    """Which instruction parts differ, when both records list them."""
    a, b = first.record.instructions_parts, later.record.instructions_parts
    if a is None or b is None:
        return ""
    if len(a) != len(b):
        return f" ({len(a)} instruction parts, then {len(b)})"
    changed = [str(i + 1) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    noun = "part" if len(changed) == 1 else "parts"
    return f" ({noun} {', '.join(changed)} of {len(a)} changed)" if changed else ""


def _tokens(turn: TurnFacts, kind: str) -> int | None:
    if kind == "input":
        return turn.usage.input_tokens
    if kind == "output":
        return turn.usage.output_tokens
    return turn.total_tokens


def _order(turn: TurnFacts) -> tuple[str, int]:
    """Which turn is later: the request's time, then its ``seq``."""
    return (turn.record.ts, turn.record.seq)


def _later(a: TurnFacts | None, b: TurnFacts) -> TurnFacts:
    return b if a is None or _order(b) >= _order(a) else a


def _error_status(turn: TurnFacts | None) -> int | None:
    """The HTTP status of ``turn``'s error answer (400 or above), else ``None``."""
    status = turn.response.status if turn is not None and turn.response is not None else None
    return status if status is not None and status >= 400 else None


def _retried(left_out: int) -> str:
    """What a count says of the calls of retried attempts it left out."""
    if not left_out:
        return ""
    return f" (and {left_out} in an attempt the agent retried, not counted)"


def _whole(n: object, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{what}() takes a whole number, 0 or more")


def _not_ended(session_ids: Sequence[str]) -> str:
    """Why ``status`` is partial while sessions have not ended."""
    shown = ", ".join(session_ids[:_LISTED])
    more = f" and {len(session_ids) - _LISTED} more" if len(session_ids) > _LISTED else ""
    return f"not ended (no sessions.jsonl line): {shown}{more}"


def _with_lost_lines(channel: ChannelCoverage, data: ChannelCoverage) -> ChannelCoverage:
    """``channel`` lowered by ``data``'s reasons (lost lines may hold its evidence)."""
    for reason in data.reasons:
        channel = channel.lower(data.status, reason)
    return channel


def _with_usage_reasons(coverage: ChannelCoverage, usage: ChannelCoverage) -> ChannelCoverage:
    for reason in usage.reasons:
        coverage = coverage.lower(coverage.status, reason)
    return coverage


def _evidence_coverage(coverage: Any) -> ChannelCoverage:
    """The four channels of complete evidence as one: worst status, every reason."""
    merged = ChannelCoverage()
    for name in ("status", "events", "actions", "data"):
        channel: ChannelCoverage = coverage.channel(name)
        for reason in channel.reasons:
            merged = merged.lower(channel.status, reason)
    return merged
