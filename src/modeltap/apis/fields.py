"""Reading fields off a parsed body: names, settings, counts and hashes.

The readers every wire API module shares. Nothing here knows one API; each
function states its contract. A reader of a request field raises
:class:`~modeltap.rules.errors.Rejected` with a rule name, never with body content;
a reader of a response field never raises (a field of the wrong type is
unknown, ``None``). Every identifier a record copies goes through
:func:`bounded`, so none can carry prompt text at length (SPEC section 8).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from modeltap.apis.contract import FORM_AZURE_DEPLOYMENT, EndpointMatch
from modeltap.evidence.records import MAX_ID_CHARS, InstructionPart, Json, Usage
from modeltap.evidence.redaction import REDACTED
from modeltap.rules.errors import Rejected, Rule


def sha256_hex(text: str) -> str:
    """Return the SHA-256 hex digest of ``text`` encoded as UTF-8.

    Lone surrogates (possible in JSON ``\\ud800`` escapes) are encoded with
    ``surrogatepass`` so hashing never fails on what a client really sent.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def instructions_digest(
    texts: list[str] | None,
) -> tuple[str | None, tuple[InstructionPart, ...] | None]:
    """Hash instruction texts joined in order with two newlines, and each on its own.

    One helper for both record fields (SPEC section 2), so they always agree:
    ``instructions_sha256`` is the hash of ``"\n\n".join(texts)`` and
    ``instructions_parts`` holds one ``{sha256, bytes}`` per text, in that
    order. A module passes the finest texts it joins (each text block of a
    message, not the message), so a block that changes on every prompt does
    not hide that the others are stable; a message of no blocks is one empty
    text (it joins as one).

    Args:
        texts: the instruction texts in join order (``[]``: none were sent,
            which hashes the empty string); ``None`` when the request leaves
            its instructions to server-held state (they are not recorded).

    Returns:
        ``(instructions_sha256, instructions_parts)``; both ``None`` exactly
        when ``texts`` is ``None``.
    """
    if texts is None:
        return None, None
    encoded = [text.encode("utf-8", "surrogatepass") for text in texts]
    parts = tuple(InstructionPart(hashlib.sha256(e).hexdigest(), len(e)) for e in encoded)
    return hashlib.sha256(b"\n\n".join(encoded)).hexdigest(), parts


def text_part_texts(content: Any, where: str) -> list[str]:
    """The texts of instructions sent as a string or a list of text parts.

    Chat's system and developer messages and Anthropic's ``system`` (and
    ``role: system`` messages) share this shape: a string, or parts
    ``{"type": "text", "text": ...}``; an empty list is one empty text (it
    joins as one, see :func:`instructions_digest`).

    Raises:
        Rejected: ``instructions_not_text`` naming ``where`` for anything
            else (an image part, a part without its text).
    """
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)
            text = part.get("text")
            if not isinstance(text, str):
                raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)
            texts.append(text)
        return texts or [""]
    raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)


def bounded(value: str, where: str) -> str:
    """Return ``value``, a string the record copies, if it is short enough.

    Every identifier a record copies from a request (model, effort, tool name
    or type, call id, image detail) goes through here, so none can carry
    prompt text at length (SPEC section 8).

    Raises:
        Rejected: ``value_too_long`` naming ``where`` (a fixed field name)
            when ``value`` is longer than :data:`~modeltap.evidence.records.MAX_ID_CHARS`.
    """
    if len(value) > MAX_ID_CHARS:
        raise Rejected(Rule.VALUE_TOO_LONG, where)
    return value


def optional_name(value: Any, where: str) -> str | None:
    """A name or id kept when it is a non-empty string (bounded), else ``None``
    (unknown: an empty one too, never ``""``).

    Raises:
        Rejected: ``value_too_long`` for an overlong string.
    """
    return bounded(value, where) if isinstance(value, str) and value else None


def require_model(body: Json) -> str:
    """Return the body's ``model``.

    Raises:
        Rejected: ``missing_model`` if absent, not a string or empty;
            ``value_too_long`` if longer than ``MAX_ID_CHARS``.
    """
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Rejected(Rule.MISSING_MODEL)
    return bounded(model, "model")


def request_model(body: Json, endpoint: EndpointMatch | None) -> str:
    """Return the model a request asks for: the one its path names, else the body's.

    Where the path names the model (an Azure deployment, a Bedrock model id,
    a Vertex model) it decides: it is what the upstream serves. On Azure's
    deployment form the body may name another (the AzureOpenAI client still
    sends the caller's ``model``, and Azure runs the deployment); on the
    other clouds' forms the clients send none, and a body ``model`` that
    names another model than the path is refused: an upstream (or a gateway
    in front of one) reading the body would run another model than the
    record says.

    Args:
        body: the parsed request body.
        endpoint: what the path said, or ``None`` (the API's own path).

    Raises:
        Rejected: ``missing_model`` when neither names one (see
            :func:`require_model`); ``malformed_setting`` (``model``) for a
            body model that is not a string beside a path's;
            ``model_mismatch`` when it names another model than the path
            (not on Azure's deployment form); ``value_too_long`` for an
            overlong one.
    """
    if endpoint is None or endpoint.model_from_path is None:
        return require_model(body)
    sent = optional_str(body.get("model"), "model")
    named = bounded(endpoint.model_from_path, "model")
    if endpoint.form != FORM_AZURE_DEPLOYMENT:
        require_same_model(sent, named)
    return named


def require_same_model(sent: str | None, named: str) -> None:
    """Refuse a model the body names beside the one the path names, unless it is that one.

    Args:
        sent: the body's model (``None``: it names none).
        named: the path's model, decoded.

    Raises:
        Rejected: ``model_mismatch`` when ``sent`` is another model.
    """
    if sent is not None and sent != named:
        raise Rejected(Rule.MODEL_MISMATCH)


def reject_messages_and_input(body: Json) -> None:
    """Refuse a body carrying both ``messages`` and ``input``.

    Raises:
        Rejected: ``messages_and_input``.
    """
    if "messages" in body and "input" in body:
        raise Rejected(Rule.MESSAGES_AND_INPUT)


def optional_str(value: Any, where: str) -> str | None:
    """Return ``value`` if it is a string (bounded) or ``None``.

    Raises:
        Rejected: ``malformed_setting`` naming ``where`` (a fixed field name);
            ``value_too_long`` for a string over ``MAX_ID_CHARS``.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return bounded(value, where)
    raise Rejected(Rule.MALFORMED_SETTING, where)


#: Keys of a recorded setting object whose values are kept, with their types
#: (Anthropic ``thinking``: ``{type, budget_tokens, display}``).
SettingKeys = dict[str, type]


def setting_by_name(value: Any, known: SettingKeys, where: str) -> Json | None:
    """A setting object as the record keeps it: known keys with their values,
    unknown keys by name only (value ``REDACTED``), so an extra field cannot
    carry prompt text into the record (SPEC section 8).

    Args:
        value: the setting as sent (``None`` when absent).
        known: the keys whose values are kept, with the type each must have
            (``str`` values are bounded; ``int`` excludes booleans; ``null``
            is kept as sent).
        where: the setting's name, for refusals.

    Returns:
        The object to record, or ``None`` when absent.

    Raises:
        Rejected: ``malformed_setting`` when it is not an object or a known
            key has the wrong type; ``value_too_long`` for an overlong key or
            string value.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Rejected(Rule.MALFORMED_SETTING, where)
    kept: Json = {}
    for key, item in value.items():
        bounded(key, where)
        kind = known.get(key)
        if kind is None:
            kept[key] = REDACTED
        elif item is None:
            kept[key] = None
        elif isinstance(item, str) and kind is str:
            kept[key] = bounded(item, f"{where}.{key}")
        elif isinstance(item, kind) and (kind is bool or not isinstance(item, bool)):
            kept[key] = item
        else:
            raise Rejected(Rule.MALFORMED_SETTING, f"{where}.{key}")
    return kept


def optional_bool(value: Any, where: str) -> bool | None:
    """Return ``value`` if it is a bool or ``None``.

    Raises:
        Rejected: ``malformed_setting`` naming ``where``.
    """
    if value is None or isinstance(value, bool):
        return value
    raise Rejected(Rule.MALFORMED_SETTING, where)


def token_count(value: Any) -> int | None:
    """Return a reported token count, or ``None`` when it is absent or not an int."""
    return whole_number(value)


def input_with_cache(usage: Usage) -> Usage:
    """``usage`` with the cache reads and writes added to ``input_tokens``.

    For the wires whose input count leaves the cached tokens out (Anthropic
    Messages, Bedrock Converse); a cache count not reported adds nothing, and
    an unknown input count stays unknown.
    """
    if usage.input_tokens is None:
        return usage
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    return dataclasses.replace(usage, input_tokens=usage.input_tokens + cached)


def whole_number(value: Any) -> int | None:
    """``value`` if it is an int (a bool is not), else ``None``: unknown."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def number(value: Any) -> float | None:
    """``value`` as a float if it is a JSON number (a bool is not), else ``None``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def string_list(value: Any) -> tuple[str, ...] | None:
    """Stop sequences as sent: one string, or a list of strings; else ``None``."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


#: ``gen_ai.output.type`` of the response formats the APIs name.
_OUTPUT_TYPES = {"text": "text", "json_object": "json", "json_schema": "json"}


def output_type(response_format: Any) -> str | None:
    """The ``gen_ai.output.type`` a ``{"type": ...}`` format object asks for, or ``None``."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    return _OUTPUT_TYPES.get(kind) if isinstance(kind, str) else None


def str_or_none(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``: a field of the wrong type is unknown."""
    return value if isinstance(value, str) else None


def id_or_none(value: Any) -> str | None:
    """``value`` if it is a string with something in it, else ``None``.

    Unknown is null, never ``""``: an id or model sent empty is a placeholder
    (Azure OpenAI opens a chat stream with a prompt-filter chunk whose ``id``
    and ``model`` are ``""``), and a stream observer takes the first value
    that is not one.
    """
    return value if isinstance(value, str) and value else None


def objects(value: Any) -> list[Json]:
    """The objects of a list, in order (anything else in it skipped); ``[]`` for no list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
