"""Audited JSON bodies: parsing with the duplicate-key check, payload eliding, sizes.

Every request body or WebSocket message modeltap audits is parsed here, the
same way for every wire API: one JSON object (:func:`parse_json_object`),
without a repeated key anywhere (:func:`reject_duplicate_keys`), optionally
with large image and file payloads replaced by a marker first
(:func:`elide_payloads`) so the parse never copies what the audit does not
read. :func:`utf8_len` measures a value as it was sent, elided payloads
included. Refusals name a rule, never body content.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from modeltap.evidence.records import Json
from modeltap.rules.errors import Rejected, Rule


def parse_json_object(
    raw: bytes, invalid: Rule = Rule.INVALID_JSON, not_object: Rule = Rule.BODY_NOT_OBJECT
) -> Json:
    """Parse a request body (or WebSocket message) that must be one JSON object.

    Args:
        raw: the decoded (uncompressed) body bytes.
        invalid: the rule refusing text that is not JSON.
        not_object: the rule refusing JSON that is not an object (a WebSocket
            message refuses both as ``ws_invalid_json``).

    Returns:
        The parsed object.

    Raises:
        Rejected: ``invalid``, ``not_object`` or ``duplicate_key``.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Rejected(invalid) from None
    if not isinstance(value, dict):
        raise Rejected(not_object)
    reject_duplicate_keys(raw, value)
    reject_case_variants(value)
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
            if colons(raw) != colons(written):
                raise Rejected(Rule.DUPLICATE_KEY)
            return
    # Escaped colons, or nesting deeper than orjson writes: count the members
    # of the text itself, outside its strings.
    if colons(_JSON_STRING.sub(b"", raw)) != _member_count(value):
        raise Rejected(Rule.DUPLICATE_KEY)


# --------------------------------------------------------------------------
# Keys that differ only in case
#
# Go's encoding/json (Ollama, LocalAI, Go gateways such as one-api) fills a
# struct field from a key that matches its name "preferring an exact match but
# also accepting a case-insensitive match", with Unicode simple folding (the
# long s U+017F is "s", the Kelvin sign U+212A is "k"): {"model": "a", "Model": "b"} runs "b" there,
# and a lone {"Instructions": ...} is read as the instructions the audit found
# absent. Two keys of one object equal once folded are refused anywhere (no
# API spells two fields that way); at the top level, so is a key that folds to
# a field the audit reads without being spelled as it.

#: Top-level request fields the audits read, as each API spells them.
READ_FIELDS: Final = frozenset(
    {
        "model", "modelId", "messages", "input", "instructions", "system", "tools",
        "tool_choice", "toolConfig", "tool_config", "contents", "systemInstruction",
        "system_instruction", "generationConfig", "generation_config", "cachedContent",
        "cached_content", "request", "previous_response_id", "conversation", "thread",
        "prompt", "reasoning", "reasoning_effort", "thinking", "output_config",
        "outputConfig", "additionalModelRequestFields", "inferenceConfig", "stream",
        "generate", "mcp_servers", "anthropic_version", "type", "response",
    }
)  # fmt: skip
_FOLDED_FIELDS: Final = {name.casefold(): name for name in READ_FIELDS}


def reject_case_variants(value: Json) -> None:
    """Refuse keys a case-insensitive reader takes for one another (see above).

    Args:
        value: a parsed request body (or WebSocket message).

    Raises:
        Rejected: ``case_variant_key``.
    """
    for key in value:
        if _FOLDED_FIELDS.get(key.casefold(), key) != key:
            raise Rejected(Rule.CASE_VARIANT_KEY)
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        if type(item) is dict:
            if len(item) > 1:
                keys = "\x00".join(item)
                # Lower-case ASCII keys fold to themselves (the usual case, C speed).
                lower = keys.isascii() and keys == keys.lower()
                if not lower and len({key.casefold() for key in item}) != len(item):
                    raise Rejected(Rule.CASE_VARIANT_KEY)
            children = item.values()
        else:
            children = item
        for child in children:
            if type(child) is dict or type(child) is list:
                push(child)


#: Slice size of :func:`colons`: a large body is never copied whole.
_COLON_SLICE = 1024 * 1024


def colons(data: bytes) -> int:
    """How many ``:`` bytes ``data`` holds.

    ``bytes.replace`` finds a single byte with ``memchr``; ``bytes.count``
    looks at every byte in turn and is several times slower (70 us against
    15 us for a 200 KB agent turn). Bodies over 1 MiB go in 1 MiB slices, so
    the copy ``replace`` makes stays small.
    """
    if len(data) <= _COLON_SLICE:
        return len(data) - len(data.replace(b":", b""))
    view = memoryview(data)
    total = 0
    for start in range(0, len(data), _COLON_SLICE):
        piece = bytes(view[start : start + _COLON_SLICE])
        total += len(piece) - len(piece.replace(b":", b""))
    return total


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


def json_bytes(value: Any) -> bytes | None:
    """``value`` as compact JSON, or ``None`` if orjson cannot write it.

    orjson reads up to 1024 levels of nesting but writes at most 254, so a
    parsed body can hold values that cannot be written back as they are.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def json_text(value: Any) -> str | None:
    """``value`` as compact JSON text (a tool input the model sent as an object),
    or ``None`` if orjson cannot write it."""
    encoded = json_bytes(value)
    return encoded.decode() if encoded is not None else None


def utf8_len(value: Any) -> int:
    """Size in bytes of a tool result as sent: strings as UTF-8, anything else as JSON.

    A value nested deeper than orjson writes is measured without encoding it
    whole, so its size is still the size sent, never a silent 0.
    """
    if isinstance(value, str):
        if value.isascii() and _MARK_TEXT not in value:
            return len(value)  # one byte a character; isascii() is O(1) in CPython
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
_MARK_TEXT = _MARK.decode()
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
