"""Reading Gemini's fields in both spellings.

Keys come in camelCase and, from the Python SDK, in snake_case
(``thinking_config`` fields, ``inline_data.mime_type``): both are read, as
Google's JSON parser reads both. The audit refuses an object that spells one
field both ways (``duplicate_key``: parsers disagree on which wins); what
telemetry reads takes either, camelCase first.
"""

from __future__ import annotations

import re
from typing import Any

from modeltap.evidence.records import Json
from modeltap.rules.errors import Rejected, Rule


def snake_case(camel: str) -> str:
    """``thinkingConfig`` as ``thinking_config``."""
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), camel)


def field(obj: Json, camel: str, where: str) -> Any:
    """``obj``'s field ``camel``, spelt in camelCase or snake_case (``None`` if absent).

    Raises:
        Rejected: ``duplicate_key`` when both spellings are present.
    """
    snake = snake_case(camel)
    if snake != camel and snake in obj:
        if camel in obj:
            raise Rejected(Rule.DUPLICATE_KEY, where)
        return obj[snake]
    return obj.get(camel)


def has_field(obj: Json, camel: str) -> bool:
    """Whether ``obj`` has field ``camel`` in either spelling (reads nothing)."""
    return camel in obj or snake_case(camel) in obj


def camel_case(key: str) -> str:
    """``function_declarations`` as ``functionDeclarations`` (camelCase stays)."""
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def request_of(body: Json) -> Json:
    """The request itself: Code Assist's ``request``, else the body (``{}`` when malformed)."""
    request = body.get("request") if "request" in body else body
    return request if isinstance(request, dict) else {}


def lenient_field(obj: Json, camel: str) -> Any:
    """A field in either spelling, for telemetry (never raises; camelCase first)."""
    value = obj.get(camel)
    return obj.get(snake_case(camel)) if value is None else value
