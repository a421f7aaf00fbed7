"""MCP tool executions read back: what a remote tool really did (SPEC 3b).

An execution is a ``tools/call`` the agent sent to a mounted MCP server:
its audit line (written before it was forwarded) and the ``mcp_result``
that answered it. A 2026-07-28 ``tools/call`` answered ``input_required``
is retried with the input asked for (``continues_seq``): the retries are
the same execution, and the answer that ends it is the first one that asks
for no more input. Which model tool call an execution ran is decided by the
coverage fold (:class:`~modeltap.evidence.coverage.SessionEvidence`, with
:mod:`modeltap.evidence.mcp_pairing`'s rule, the one the tool-call budget
uses); :mod:`modeltap.evidence.capture.grouping` links the two.

Nothing here is content: names, ids, sizes and flags. An execution whose
answer was not seen has ``outcome`` ``None`` and ``failed`` ``None``
(unknown), never a success. A ``tools/call`` refused before it was
forwarded (the budget, a bad body) is no execution: :class:`DeniedToolCall`
names it, from its ``rejected`` event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from modeltap.evidence.coverage import INPUT_REQUIRED, TOOLS_CALL, starts_execution
from modeltap.evidence.records import (
    Event,
    JsonRpcId,
    McpAuditRecord,
    McpResultEvent,
    RejectedEvent,
)

__all__ = ["TOOL_ERROR", "DeniedToolCall", "McpExecution", "denied_tool_calls", "executions_of"]

#: ``McpExecution.outcome`` of a result that says ``isError: true``.
TOOL_ERROR: Final = "tool_error"


@dataclass(frozen=True, slots=True, kw_only=True)
class McpExecution:
    """One MCP ``tools/call`` execution and how it ended."""

    #: The ``tools/call`` line that began it.
    record: McpAuditRecord
    #: The ``input_required`` retries that continued it, in order.
    retries: tuple[McpAuditRecord, ...] = ()
    #: The answer that ended it; ``None`` when none was seen.
    answer: McpResultEvent | None = None
    #: The model call it ran, as ``(turn index, position of the call in its
    #: response)``; ``None``: no model call of its session asked for it.
    call: tuple[int, int] | None = None

    @property
    def server(self) -> str:
        """The ``--mcp`` NAME (or ``--mcp-host`` host) it ran on."""
        return self.record.mcp_server

    @property
    def tool(self) -> str | None:
        """The server's own tool name (``params.name``)."""
        return self.record.tool_name

    @property
    def seq(self) -> int:
        """The ``seq`` of the ``tools/call`` that began it."""
        return self.record.seq

    @property
    def jsonrpc_id(self) -> JsonRpcId | None:
        """The JSON-RPC id of that ``tools/call``."""
        return self.record.jsonrpc_id

    @property
    def outcome(self) -> str | None:
        """``result``, ``tool_error`` (a result with ``isError: true``),
        ``error`` (a JSON-RPC error), ``http_error``; ``None`` when no
        answer was seen."""
        if self.answer is None:
            return None
        if self.answer.outcome == "result" and self.answer.is_error is True:
            return TOOL_ERROR
        return self.answer.outcome

    @property
    def failed(self) -> bool | None:
        """Whether the tool failed: ``isError: true``, a JSON-RPC error or an
        HTTP error (an HTTP 200 carrying either is a failure); ``False`` for
        a result that says ``isError: false``; ``None`` when unknown (no
        answer seen, or a flag that was not a boolean)."""
        outcome = self.outcome
        if outcome is None:
            return None
        if outcome != "result":
            return True
        return False if self.answer is not None and self.answer.is_error is False else None

    @property
    def error_code(self) -> int | None:
        """A JSON-RPC error's code; ``None`` otherwise."""
        return self.answer.error_code if self.answer is not None else None

    @property
    def duration_ms(self) -> float | None:
        """From forwarding the ``tools/call`` (its last retry's) to the answer."""
        return self.answer.duration_ms if self.answer is not None else None

    @property
    def result_bytes(self) -> int | None:
        """The result's content items' sizes summed; ``None`` without a result."""
        if self.answer is None or self.answer.content is None:
            return None
        return sum(item.bytes for item in self.answer.content)

    def to_json(self) -> dict[str, object]:
        """The execution as the report and the page write it (no content)."""
        answer = self.answer
        return {
            "server": self.server,
            "tool": self.tool,
            "seq": self.seq,
            "jsonrpc_id": self.jsonrpc_id,
            "tool_call_id": self.record.tool_call_id,
            "ts": self.record.ts,
            "arguments_bytes": self.record.arguments_bytes,
            "retries": len(self.retries),
            "outcome": self.outcome,
            "failed": self.failed,
            "is_error": answer.is_error if answer is not None else None,
            "error_code": answer.error_code if answer is not None else None,
            "http_status": answer.status if answer is not None else None,
            "result_bytes": self.result_bytes,
            "content_types": (
                [item.type for item in answer.content]
                if answer is not None and answer.content is not None
                else None
            ),
            "structured_content": answer.structured_content if answer is not None else None,
            "duration_ms": self.duration_ms,
        }


def executions_of(
    records: Iterable[McpAuditRecord],
    events: Iterable[Event],
    executed_by: dict[tuple[int, int], int],
) -> tuple[McpExecution, ...]:
    """A session's executions, in the order they began.

    Args:
        records: its MCP audit lines, in file order.
        events: its events (the ``mcp_result`` ones are read).
        executed_by: which execution (``seq``) ran which model call, as the
            coverage fold paired them.

    Returns:
        One :class:`McpExecution` per ``tools/call`` that began one.
    """
    began: dict[int, McpAuditRecord] = {}
    root_of: dict[int, int] = {}
    retries: dict[int, list[McpAuditRecord]] = {}
    for record in records:
        if starts_execution(record):
            began[record.seq] = record
            root_of[record.seq] = record.seq
        elif record.mcp_method == TOOLS_CALL and record.continues_seq is not None:
            root = root_of.get(record.continues_seq, record.continues_seq)
            root_of[record.seq] = root
            retries.setdefault(root, []).append(record)
    answers: dict[int, McpResultEvent] = {}
    for event in events:
        if not isinstance(event, McpResultEvent) or event.seq is None:
            continue
        began_at = root_of.get(event.seq)
        if began_at is None or began_at in answers or event.result_type == INPUT_REQUIRED:
            continue  # the first answer that ends the execution counts
        answers[began_at] = event
    call_of = {seq: call for call, seq in executed_by.items()}
    return tuple(
        McpExecution(
            record=record,
            retries=tuple(retries.get(seq, ())),
            answer=answers.get(seq),
            call=call_of.get(seq),
        )
        for seq, record in began.items()
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeniedToolCall:
    """A ``tools/call`` modeltap refused before it reached the server."""

    ts: str
    rule: str
    server: str
    tool: str | None
    jsonrpc_id: JsonRpcId | None

    def to_json(self) -> dict[str, object]:
        """As the report writes it."""
        return {
            "ts": self.ts,
            "rule": self.rule,
            "server": self.server,
            "tool": self.tool,
            "jsonrpc_id": self.jsonrpc_id,
        }


def denied_tool_calls(refusals: Iterable[RejectedEvent]) -> tuple[DeniedToolCall, ...]:
    """The ``tools/call`` messages the refusals name, in order."""
    out: list[DeniedToolCall] = []
    for refusal in refusals:
        if refusal.mcp is None:
            continue
        for message in refusal.mcp.messages:
            if message.mcp_method == TOOLS_CALL and message.message_type == "request":
                out.append(
                    DeniedToolCall(
                        ts=refusal.ts,
                        rule=refusal.rule,
                        server=refusal.mcp.mcp_server,
                        tool=message.tool_name,
                        jsonrpc_id=message.jsonrpc_id,
                    )
                )
    return tuple(out)
