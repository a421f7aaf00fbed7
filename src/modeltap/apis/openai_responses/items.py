"""What the Responses API's items are, as every side reads them.

A *message* is an item with ``type: "message"``, or with a ``role`` and no
``type`` (the Agents SDK sends those); other items (``additional_tools``,
which also has a ``role``, function calls, reasoning, item references) are
not messages. A client tool call is a ``function_call`` or
``custom_tool_call`` output item. ``finish_reasons`` is
``(incomplete_details.reason,)`` for an incomplete response
(``("max_output_tokens",)``) and ``(status,)`` otherwise (``("completed",)``,
``("failed",)``): the Responses API has no per-choice finish reason, and the
incomplete reason is the one that explains a stop.
"""

from typing import Any, Final

from modeltap.apis import message_parts as parts
from modeltap.apis.fields import id_or_none, str_or_none
from modeltap.evidence.records import Json, ToolCall

INSTRUCTION_ROLES = frozenset({"system", "developer"})
CLIENT_TOOL_TYPES = frozenset({"function", "custom"})
TOOL_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})


def is_message(item: Json) -> bool:
    """A message item: ``type: "message"``, or a ``role`` without a ``type``."""
    kind = item.get("type")
    return kind == "message" or (kind is None and "role" in item)


def finish_reasons(status: str | None, incomplete_details: Any) -> tuple[str, ...] | None:
    """The incomplete reason for an incomplete response, else the status (module doc)."""
    if status == "incomplete" and isinstance(incomplete_details, dict):
        reason = incomplete_details.get("reason")
        if isinstance(reason, str):
            return (reason,)
    return None if status is None else (status,)


def tool_call(item: Json) -> ToolCall | None:
    """The client tool call an output item asks for, or None for other items."""
    kind = item.get("type")
    if kind == "function_call":
        arguments = item.get("arguments")
    elif kind == "custom_tool_call":
        arguments = item.get("input")
    else:
        return None
    return ToolCall(
        call_id=id_or_none(item.get("call_id")),
        name=str_or_none(item.get("name")),
        arguments=str_or_none(arguments),
        namespace=str_or_none(item.get("namespace")),
    )


#: How a Response's end maps onto the conventions' finish reasons.
FINISH_REASONS: Final = {
    "completed": "stop",
    "max_output_tokens": "length",
    "content_filter": "content_filter",
    "failed": "error",
}


def finish_reason(status: str | None, reasons: tuple[str, ...] | None, calls: bool) -> str:
    """``tool_call`` when a completed response asks for tools, else the mapped reason."""
    if status == "completed" and calls:
        return "tool_call"
    reason = reasons[0] if reasons else status
    return parts.finish_reason(reason, FINISH_REASONS)
