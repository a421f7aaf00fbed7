"""Which model tool call an MCP execution answers (pure; no I/O).

A model asks for a tool call in a response; the agent then runs it, and when
the tool lives on a remote MCP server that run is a ``tools/call`` the proxy
audits. The two are one tool call (SPEC 3b, "Pairing"): the tool-call budget
counts them once (:class:`~modeltap.core.sessions.SessionTracker`), and the
readers of the files show the execution under the call. An execution pairs
with the oldest waiting model call of its session that

- carries the id the agent put in the ``tools/call``'s ``_meta`` (Claude
  Code's ``claudecode/toolUseId``, Codex's ``callId``: the audit line's
  ``tool_call_id``), or, without one,
- names the server's tool the agent's way (:func:`~modeltap.apis.mcp.names.names_server_tool`)
  with equal canonical arguments (keys sorted, no spaces; no arguments is
  ``{}``).

An execution can reach the proxy before the response that asked for it has
ended (an agent that runs a tool as soon as its call has streamed): it then
waits, and the model call that comes matches it by the same rule. Both sides
keep at most :data:`MAX_WAITING` items (oldest dropped): memory stays flat
over a long session.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Final

import orjson

from modeltap.apis.mcp.messages import arguments_digest
from modeltap.apis.mcp.names import names_server_tool
from modeltap.evidence.records import ToolCall

#: The most model calls (and executions) one session keeps waiting.
MAX_WAITING: Final = 1024
#: The digest of no arguments: ``{}`` as canonical JSON.
EMPTY_ARGUMENTS: Final = hashlib.sha256(b"{}").hexdigest()


@dataclass(frozen=True, slots=True)
class Execution:
    """An MCP ``tools/call`` as the pairing reads it (from its audit line)."""

    server: str
    tool: str
    #: The canonical arguments' SHA-256; ``None``: none sent (read as ``{}``).
    arguments_sha256: str | None
    #: The model's call id the agent put in ``_meta``, if it did.
    tool_call_id: str | None


def call_arguments_sha256(arguments: str | None) -> str | None:
    """The canonical digest of a model call's arguments (as the model sent them,
    JSON text); ``None`` when they are not a JSON object."""
    if arguments is None or not arguments.strip():
        return EMPTY_ARGUMENTS
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    digest = arguments_digest(value)
    return digest[0] if digest is not None else None


def pairs(call: ToolCall, execution: Execution) -> bool:
    """Whether ``execution`` ran the model's ``call`` (the module's rule)."""
    if execution.tool_call_id is not None:
        return call.call_id == execution.tool_call_id
    if not names_server_tool(call.name, call.namespace, execution.server, execution.tool):
        return False
    wanted = execution.arguments_sha256 or EMPTY_ARGUMENTS
    return call_arguments_sha256(call.arguments) == wanted


class ExecutionPairing[T]:
    """A session's model tool calls awaiting their execution, and executions
    awaiting the model call that asked for them, each with the caller's item."""

    __slots__ = ("_calls", "_executions")

    def __init__(self) -> None:
        self._calls: deque[tuple[ToolCall, T]] = deque(maxlen=MAX_WAITING)
        self._executions: deque[tuple[Execution, T]] = deque(maxlen=MAX_WAITING)

    def find_call(self, execution: Execution) -> T | None:
        """The item of the waiting model call ``execution`` answers, changing nothing."""
        for call, item in self._calls:
            if pairs(call, execution):
                return item
        return None

    def executed(self, execution: Execution, item: T) -> T | None:
        """Take in an execution: the waiting call it answers stops waiting.

        Returns:
            That call's item; ``None`` when none waits (the execution then
            waits, with ``item``, for a model call that asks for it).
        """
        for index, (call, found) in enumerate(self._calls):
            if pairs(call, execution):
                del self._calls[index]
                return found
        self._executions.append((execution, item))
        return None

    def same_tool(self, execution: Execution) -> ToolCall | None:
        """The oldest waiting model call of the execution's tool, whatever its
        arguments (when the execution pairs with none: its arguments differ)."""
        for call, _item in self._calls:
            if names_server_tool(call.name, call.namespace, execution.server, execution.tool):
                return call
        return None

    def withdraw(self, item: T) -> bool:
        """Stop waiting for an execution of the model call whose item is ``item``
        (its result came back without one: a tool the agent ran itself).

        Returns:
            Whether such a call was waiting.
        """
        for index, (_call, found) in enumerate(self._calls):
            if found == item:
                del self._calls[index]
                return True
        return False

    def asked(self, call: ToolCall, item: T) -> T | None:
        """Take in a model's call: an execution already seen for it stops waiting.

        Returns:
            That execution's item; ``None`` when none was seen (the call then
            waits, with ``item``, for its execution).
        """
        for index, (execution, found) in enumerate(self._executions):
            if pairs(call, execution):
                del self._executions[index]
                return found
        self._calls.append((call, item))
        return None
