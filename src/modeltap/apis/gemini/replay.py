"""What a replay compares of a Gemini request
(:meth:`~modeltap.apis.contract.Wire.comparable_body`).

A Gemini request leaves out what a client makes up on every run: Gemini CLI
gives each call the server sent without an id one of its own
(``read_file_<epoch ms>_<n>``), so call ids count by their order of first
appearance (which result answers which call still counts); and Code Assist's
wrapper carries a per-prompt ``user_prompt_id`` and a per-session
``request.session_id``.
"""

from __future__ import annotations

from typing import Any, Final

from modeltap.evidence.records import Json

#: Gemini's function-call and function-response parts, in either spelling:
#: their ``id`` is compared by position, not by value (:func:`comparable_body`).
_CALL_PARTS: Final = (
    "functionCall",
    "function_call",
    "functionResponse",
    "function_response",
)


def comparable_body(body: Json) -> Json:
    """A Gemini request without what its client makes up per run (see the module docstring).

    Args:
        body: the parsed request body, either form, not changed.

    Returns:
        A copy where it differs: call ids renamed ``#1``, ``#2`` … by first
        appearance, Code Assist's ``user_prompt_id`` and ``request.session_id``
        left out.
    """
    wrapped = isinstance(body.get("request"), dict)
    request: Json = body["request"] if wrapped else body
    if wrapped:
        request = {k: v for k, v in request.items() if k != "session_id"}
        body = {k: v for k, v in body.items() if k != "user_prompt_id"}
    ids: dict[str, str] = {}
    contents = request.get("contents")
    if isinstance(contents, list):
        request = {**request, "contents": [_renamed_ids(c, ids) for c in contents]}
    return {**body, "request": request} if wrapped else request


def _renamed_ids(content: Any, ids: dict[str, str]) -> Any:
    """One of ``contents``, its call ids renamed ``#1``, ``#2`` … in order of first appearance."""
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return content
    renamed = []
    for part in content["parts"]:
        if isinstance(part, dict):
            for key in _CALL_PARTS:
                call = part.get(key)
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    new_id = ids.setdefault(call["id"], f"#{len(ids) + 1}")
                    part = {**part, key: {**call, "id": new_id}}
        renamed.append(part)
    return {**content, "parts": renamed}
