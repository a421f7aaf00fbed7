"""Small pure pieces every wire API module shares.

Nothing here knows one API; each function states its contract and raises
:class:`~modeltap.errors.Rejected` with a rule name, never with body content.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from modeltap.errors import Rejected
from modeltap.records import MAX_ID_CHARS, REDACTED, Json


def parse_json_object(raw: bytes) -> Json:
    """Parse a request body that must be one JSON object.

    Args:
        raw: the decoded (uncompressed) body bytes.

    Returns:
        The parsed object.

    Raises:
        Rejected: ``invalid_json``, ``body_not_object`` or ``duplicate_key``.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Rejected("invalid_json") from None
    if not isinstance(value, dict):
        raise Rejected("body_not_object")
    reject_duplicate_keys(raw, value)
    return value


# --------------------------------------------------------------------------
# Duplicate keys
#
# {"model": "a", "model": "b"} is read as "b" by orjson (and by Python and
# JavaScript), as "a" by other parsers, and refused by some: the audit would
# record one model while the upstream runs another. orjson keeps the last value
# without a word, so duplicates are found by counting. Every object member in
# the text has exactly one ":" outside strings, and JSON has no other ":"
# outside strings; a parsed object keeps one member per distinct key. orjson
# writes the parsed value back with every ":" of its strings as is (it never
# escapes one), so, as long as the text spells no ":" as an escape:
#
#     text.count(":")   = members in the text   + ":" in strings
#     written.count(":") = members kept by parse + ":" in strings
#
# and the two counts differ exactly when a key was repeated. Two C-speed passes
# (orjson.dumps and bytes.count), about the cost of the parse itself.

#: Present when a string may spell ":" as an escape (\u003a); the exact, slower
#: count then takes over.
_ESCAPE_HINT = b"\\u003"
#: One JSON string, escapes included (the unrolled form: linear, no backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def reject_duplicate_keys(raw: bytes, value: Any) -> None:
    """Refuse a JSON text in which some object repeats a key, at any depth.

    Keys count as the same when they are equal once unescaped (``"model"`` and
    ``"mod\\u0065l"`` are one key), as every parser reads them.

    Args:
        raw: the JSON text ``value`` was parsed from (valid JSON).
        value: ``orjson.loads(raw)``.

    Raises:
        Rejected: ``duplicate_key``.
    """
    if _ESCAPE_HINT not in raw:
        written = json_bytes(value)
        if written is not None:
            if raw.count(b":") != written.count(b":"):
                raise Rejected("duplicate_key")
            return
    # Escaped colons, or nesting deeper than orjson writes: count the members
    # of the text itself, outside its strings.
    if _JSON_STRING.sub(b"", raw).count(b":") != _member_count(value):
        raise Rejected("duplicate_key")


def _member_count(value: Any) -> int:
    """How many members all the objects in ``value`` hold (explicit stack, any depth)."""
    members = 0
    stack = [value]
    while stack:
        item = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict):
            members += len(item)
        for child in children:
            if isinstance(child, dict | list):
                stack.append(child)
    return members


def sha256_hex(text: str) -> str:
    """Return the SHA-256 hex digest of ``text`` encoded as UTF-8.

    Lone surrogates (possible in JSON ``\\ud800`` escapes) are encoded with
    ``surrogatepass`` so hashing never fails on what a client really sent.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def instructions_sha256(texts: list[str]) -> str:
    """Hash instruction texts joined in order with two newlines (SPEC section 2)."""
    return sha256_hex("\n\n".join(texts))


def bounded(value: str, where: str) -> str:
    """Return ``value``, a string the record copies, if it is short enough.

    Every identifier a record copies from a request (model, effort, tool name
    or type, call id, image detail) goes through here, so none can carry
    prompt text at length (SPEC section 8).

    Raises:
        Rejected: ``value_too_long`` naming ``where`` (a fixed field name)
            when ``value`` is longer than :data:`~modeltap.records.MAX_ID_CHARS`.
    """
    if len(value) > MAX_ID_CHARS:
        raise Rejected("value_too_long", where)
    return value


def optional_name(value: Any, where: str) -> str | None:
    """A name or id kept when it is a string (bounded), else ``None`` (unknown).

    Raises:
        Rejected: ``value_too_long`` for an overlong string.
    """
    return bounded(value, where) if isinstance(value, str) else None


def require_model(body: Json) -> str:
    """Return the body's ``model``.

    Raises:
        Rejected: ``missing_model`` if absent, not a string or empty;
            ``value_too_long`` if longer than ``MAX_ID_CHARS``.
    """
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Rejected("missing_model")
    return bounded(model, "model")


def reject_messages_and_input(body: Json) -> None:
    """Refuse a body carrying both ``messages`` and ``input``.

    Raises:
        Rejected: ``messages_and_input``.
    """
    if "messages" in body and "input" in body:
        raise Rejected("messages_and_input")


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
    raise Rejected("malformed_setting", where)


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
            (``str`` values are bounded; ``null`` is kept as sent).
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
        raise Rejected("malformed_setting", where)
    kept: Json = {}
    for key, item in value.items():
        bounded(key, where)
        kind = known.get(key)
        if kind is None:
            kept[key] = REDACTED
        elif item is None:
            kept[key] = None
        elif kind is int and isinstance(item, int) and not isinstance(item, bool):
            kept[key] = item
        elif kind is str and isinstance(item, str):
            kept[key] = bounded(item, f"{where}.{key}")
        else:
            raise Rejected("malformed_setting", f"{where}.{key}")
    return kept


def optional_bool(value: Any, where: str) -> bool | None:
    """Return ``value`` if it is a bool or ``None``.

    Raises:
        Rejected: ``malformed_setting`` naming ``where``.
    """
    if value is None or isinstance(value, bool):
        return value
    raise Rejected("malformed_setting", where)


def token_count(value: Any) -> int | None:
    """Return a reported token count, or ``None`` when it is absent or not an int."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def json_bytes(value: Any) -> bytes | None:
    """``value`` as compact JSON, or ``None`` if orjson cannot write it.

    orjson reads up to 1024 levels of nesting but writes at most 254, so a
    parsed body can hold values that cannot be written back as they are.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def utf8_len(value: Any) -> int:
    """Size in bytes of a tool result as sent: strings as UTF-8, anything else as JSON.

    A value nested deeper than orjson writes is measured without encoding it
    whole, so its size is still the size sent, never a silent 0.
    """
    if isinstance(value, str):
        return _unelided_len(value.encode("utf-8", "surrogatepass"))
    encoded = json_bytes(value)
    if encoded is not None:
        return _unelided_len(encoded)
    try:
        return _compact_json_size(value)
    except TypeError:
        return 0


def _compact_json_size(value: Any) -> int:
    """Length of ``orjson.dumps(value)``, walked with an explicit stack (no depth limit).

    Raises:
        TypeError: for a value orjson cannot encode at all (e.g. a lone surrogate).
    """
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            size += 2 + max(len(item) - 1, 0)  # braces and commas
            for key, child in item.items():
                size += len(orjson.dumps(key)) + 1  # the key and its colon
                stack.append(child)
        elif isinstance(item, list):
            size += 2 + max(len(item) - 1, 0)
            stack.extend(item)
        else:
            size += _unelided_len(orjson.dumps(item))
    return size


# --------------------------------------------------------------------------
# Large payloads
#
# A 20 MB image travels as one base64 string. The audit needs its place and
# type, never its characters, so a body is parsed with each large image or file
# payload replaced by a short marker naming its length: the parse neither
# spends time on nor keeps a second copy of what it does not read.

#: Payload strings at least this long are elided before parsing for the audit.
ELIDE_MIN_BYTES = 64 * 1024
#: Keys whose string values are image or file payloads in the three APIs
#: (chat ``image_url.url``, Responses ``image_url`` / ``file_data``, Anthropic
#: ``source.data``). No instruction text ever sits under them.
_PAYLOAD_KEY = re.compile(rb'"(?:url|image_url|data|file_data)"\s*:\s*"')
_MARK = b"modeltap-elided:"
#: The marker as JSON text (what the parse sees) and as decoded UTF-8.
_ELIDED_JSON = re.compile(rb"\\u0000modeltap-elided:(\d+)\\u0000")
_ELIDED_RAW = re.compile(rb"\x00modeltap-elided:(\d+)\x00")


def elide_payloads(raw: bytes) -> bytes:
    """Return ``raw`` with each large payload string's content replaced by a marker.

    Only a value under a payload key, at least :data:`ELIDE_MIN_BYTES` long
    and free of backslashes (so its bytes are exactly what orjson writes
    back) is elided; :func:`utf8_len` adds the elided length back, so tool
    result sizes stay exact. A body that already contains the marker text
    is returned unchanged.

    Args:
        raw: a decoded request body.

    Returns:
        ``raw`` itself when nothing was elided, else a shorter copy.
    """
    if len(raw) < ELIDE_MIN_BYTES:
        return raw
    parts: list[bytes] = []
    pos = last = 0
    while (match := _PAYLOAD_KEY.search(raw, pos)) is not None:
        start = match.end()
        end = raw.find(b'"', start)
        if end < 0:
            break
        pos = end + 1
        if end - start < ELIDE_MIN_BYTES or raw.find(b"\\", start, end) != -1:
            continue
        kept = raw[last:start]
        if _MARK in kept:
            return raw  # someone sent our marker text: measure nothing by it
        parts += (kept, b"\\u0000modeltap-elided:%d\\u0000" % (end - start))
        last = end
    if not parts:
        return raw
    tail = raw[last:]
    if _MARK in tail:
        return raw
    parts.append(tail)
    return b"".join(parts)


def _unelided_len(data: bytes) -> int:
    """``len(data)``, counting each elided payload at its original length."""
    if _MARK not in data:
        return len(data)
    size = len(data)
    for pattern in (_ELIDED_JSON, _ELIDED_RAW):
        for m in pattern.finditer(data):
            size += int(m.group(1)) - (m.end() - m.start())
    return size


def str_or_none(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``: a field of the wrong type is unknown."""
    return value if isinstance(value, str) else None


#: Provider error types are identifiers; anything else is not copied into errors.
_ERROR_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

#: A broken stream can repeat the same fault many times; its error list stays short.
MAX_CAPTURE_ERRORS = 16


def error_type(error: Any) -> str:
    """An error object's ``type`` if it is a plain identifier, else ``unknown``.

    Only the type is ever copied into capture errors, never the provider's message.
    """
    kind = error.get("type") if isinstance(error, dict) else None
    if isinstance(kind, str) and _ERROR_TYPE.fullmatch(kind):
        return kind
    return "unknown"


class StreamObserverBase:
    """What every API's stream observer shares.

    The terminal flag behind :attr:`done`, and the response's capture errors:
    deduplicated, in order, and bounded by :data:`MAX_CAPTURE_ERRORS` so a long
    broken stream cannot grow them.
    """

    def __init__(self) -> None:
        self._done = False
        self._errors: dict[str, None] = {}

    @property
    def done(self) -> bool:
        """True once the stream's terminal event was seen."""
        return self._done

    def _note(self, error: str, *, always: bool = False) -> None:
        """Add a capture error; ``always`` keeps it past the bound (the final reason)."""
        if always or len(self._errors) < MAX_CAPTURE_ERRORS:
            self._errors[error] = None
