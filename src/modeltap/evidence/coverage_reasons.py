"""What evidence coverage says, in words: the reasons every reader gives (pure).

The proxy's ``sessions.jsonl`` line, :class:`~modeltap.evidence.capture.Capture`,
``modeltap report`` and ``modeltap check`` give the same reasons because they
take them from here (the fold that decides *when* to give them is
:mod:`modeltap.evidence.coverage`). Turns are named by number, from 1 like ``seq``
(:func:`turn_number`); a refusal names its rule once (:func:`refusal_text`);
a turn the upstream never answered says "no response" (:data:`NO_ANSWER`).
"""

from __future__ import annotations

from typing import Final

from modeltap.evidence.records import NO_REQUESTS_MESSAGE, ResponseEvent, ToolCall

NO_REQUESTS: Final = NO_REQUESTS_MESSAGE
NO_RESPONSE: Final = "no response event was recorded for this request"
#: Why a request has no response in a session line written while it was in flight.
NO_RESPONSE_AT_END: Final = "no response had been seen when the session ended"
MESSAGES_NOT_RECORDED: Final = "message content is not recorded (names, counts and hashes only)"
#: Prefix of the reasons a ``sessions.jsonl`` line gave that the files do not show.
PROXY_REPORTED: Final = "the proxy reported: "
#: Why a turn has no usage when the upstream never answered it.
NO_ANSWER: Final = "no response: the upstream never answered"
#: Said of a call of an MCP tool (as the agents name them) without its result,
#: in a session that saw no MCP execution at all: nothing can be complete from
#: the tool side (SPEC 3b).
NO_MCP_SEEN: Final = (
    "; it names an MCP tool, but no MCP tools/call was seen in this session (MCP over "
    "stdio, or a server not mounted with --mcp, is invisible to the proxy)"
)
#: Said of a call without its result when the session's MCP executions ran other calls.
NOT_EXECUTED_ON_MCP: Final = "; no MCP tools/call seen in this session ran it"


def foreign_error_text(status: int) -> str:
    """An error answer not in its API's shape, as a capture error: what the
    upstream said (its status), not that a success body was malformed.

    A 404 in another shape is what a client pointed at another API's route,
    or a base URL the upstream has no such path under, gets.

    Args:
        status: the answer's HTTP status (400 and up).
    """
    text = f"the upstream answered HTTP {status}, not in this API's error shape"
    if status == 404:
        return text + ": it refused the path (wrong base URL, or another API's route?)"
    return text


def is_error_answer(event: ResponseEvent) -> bool:
    """Whether the upstream answered with an error status (400 and up)."""
    return event.status is not None and event.status >= 400


#: Why a session with MCP traffic and no model request has no usage.
NO_MODEL_REQUEST: Final = "no model request in this session (MCP traffic only)"


def mcp_only(messages: int, executions: int) -> str:
    """What a session with MCP traffic and no model request is (its
    ``sessions.jsonl`` message and its ``actions`` reason): no observed model
    call asked for its executions, so whether anything did is unknown.

    Args:
        messages: its MCP audit lines.
        executions: its ``tools/call`` executions (each once).
    """
    noun = "message" if messages == 1 else "messages"
    if executions == 0:
        ran = "no tools/call execution"
    else:
        ran = (
            f"{executions} tools/call execution{'' if executions == 1 else 's'}, "
            "none asked for by an observed model call"
        )
    return f"MCP session: {messages} MCP {noun} and no model request; {ran}"


def turn_number(index: int) -> int:
    """The number a turn is shown with: its 0-based index plus one, counted
    from 1 like ``seq`` (every message, report and page names turns so)."""
    return index + 1


def label_indexes(indexes: list[int], noun: str) -> str:
    """``[turn 3]``, ``[turns 1-3, 6]``: which turns a shared reason applies to.

    Args:
        indexes: ascending turn numbers (from 1: :func:`turn_number`).
        noun: ``"turn"``.

    Returns:
        The bracketed label.
    """
    if len(indexes) == 1:
        return f"[{noun} {indexes[0]}]"
    spans: list[str] = []
    start = prev = indexes[0]
    for i in [*indexes[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return f"[{noun}s {', '.join(spans)}]"


def never_answered(event: ResponseEvent) -> bool:
    """Whether the upstream never answered: no HTTP status and no first byte
    (unreachable, reset or timed out before answering, the proxy stopped)."""
    return event.status is None and event.ttfb_ms is None


def no_usage_reason(event: ResponseEvent) -> str:
    """Why a response carries no usage count at all, in words a reader can act on.

    Args:
        event: the response.

    Returns:
        "no response" when the upstream never answered (no status, no first
        byte: unreachable, reset before answering, timed out), the HTTP
        status of an error answer (error bodies carry no usage), else that
        the provider reported none.
    """
    if never_answered(event):
        return NO_ANSWER
    if is_error_answer(event):
        return f"an error answer (HTTP {event.status}) reports no token usage"
    return "the provider reported no token usage for this turn"


def refusal_text(rule: str, message: str) -> str:
    """A refusal as a reason: ``request refused (RULE): what``, the rule named once.

    Args:
        rule: the refusal's rule.
        message: the message the client got (``modeltap refused the request
            [rule RULE]: what.``).

    Returns:
        The reason, without the message's own preamble.
    """
    preamble = f"modeltap refused the request [rule {rule}]: "
    return f"request refused ({rule}): {message.removeprefix(preamble)}"


def unasked_execution(
    what: str, seq: int, same_tool: str | None = None, call_id: str | None = None
) -> str:
    """An MCP execution no model call of its session asked for, as a reason.

    Args:
        what: ``tool on server``.
        seq: its audit line's ``seq``.
        same_tool: the label of a model call of that tool still waiting,
            whose arguments differ (``None``: there is none).
        call_id: that call's id.
    """
    head = f"MCP tools/call {what} (seq {seq}) ran no tool call the model asked for"
    if same_tool is None:
        return f"{head} (no call of that tool with equal arguments or its call id)"
    named = f"{same_tool} ({call_id})" if call_id is not None else same_tool
    return f"{head}: its arguments differ from those of tool call {named}"


def file_moved_reason(file: str) -> str:
    """Why a session's ``data`` is partial after ``file`` was opened again at its path.

    Args:
        file: ``audit.jsonl``, ``events.jsonl`` or ``sessions.jsonl``.

    Returns:
        The reason, the same for the proxy and every reader.
    """
    return (
        f"{file} was moved or deleted under the running proxy; "
        "this session's lines written to it before are not in the out dir"
    )


def qualified_tool_name(call: ToolCall) -> str | None:
    """Return ``namespace.name`` for a namespaced call, else its ``name``.

    Args:
        call: a tool call of a response.

    Returns:
        The name, or ``None`` when the call had none.
    """
    if call.name is None:
        return None
    return f"{call.namespace}.{call.name}" if call.namespace else call.name


def tool_call_matches(call: ToolCall, name: str) -> bool:
    """Whether ``name`` designates ``call``: its bare name or ``namespace.name``.

    Args:
        call: a tool call of a response.
        name: ``"read"`` designates ``read`` in any namespace; ``"fs.read"``
            only ``read`` in namespace ``fs`` (or a call named ``fs.read``).
    """
    return call.name is not None and name in (call.name, qualified_tool_name(call))
