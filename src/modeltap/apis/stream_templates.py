"""Content deltas recognised by their bytes: most of a stream, observed without decoding.

Most events of a model's stream are content deltas that differ from the one
before only in the text they carry (and, on some wires, a sequence number or
a padding string): nothing an observer keeps. An observer says which events
are *plain* (:meth:`StreamObserverBase.plain_slots`): feeding one again, with
any value in its declared slots, changes nothing and returns what it returned
the first time. After such an event was decoded and observed in full, its raw
bytes become an :class:`EventTemplate`: the literal bytes around the slots,
and a pattern that accepts exactly the values each slot's lexical class
allows. The next events that match it byte for byte are counted as "a chunk
arrived" without being decoded; anything else is decoded in full and replaces
the template.

Exactness, by construction and checked when a template is made:

- the SSE framing is one optional ``event:`` line and one ``data:`` line, both
  ended as the exemplar ended them, then a blank line; a slot's bytes can hold
  no line end, so a matching chunk holds exactly the same lines;
- a string slot holds no ``"`` and no control character, and a ``\\`` only
  as one of JSON's escapes (never a surrogate's ``\\u``), so a JSON lexer
  ends the string where the exemplar's ended, every other token is the
  exemplar's, and the parser takes it (a text slot is never empty); an
  integer slot is a plain decimal integer;
- the template is made only if its own bytes, with probe values in the slots,
  parse to the exemplar's object with exactly those values at the slots' paths
  (types compared too): the slots are where the observer said they are, and
  nothing else (a duplicate key, an escaped quote) reads them.

So a matching event parses to the exemplar with other values in its slots,
which is what :meth:`plain_slots` promised the observer does not notice.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import orjson

from modeltap.evidence.records import Json
from modeltap.wire.sse import SSEEvent

#: A path into a parsed event: keys and list positions; the last is a key.
Path = tuple[str | int, ...]

#: A string slot's bytes: anything but a quote, a backslash or a control character
#: (line ends included), and JSON's escapes except ``\\u`` of a surrogate (a lone
#: one is refused by the parser; a pair is left to it). Unrolled, so the plain
#: run between escapes is one character class.
_PLAIN: Final = rb'[^"\\\x00-\x1f]*'
_ESCAPE: Final = rb'\\(?:["\\/bfnrt]|u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
_STRING: Final = _PLAIN + b"(?:" + _ESCAPE + _PLAIN + b")*"
#: A text slot: the same, never empty.
_TEXT: Final = b'(?!")' + _STRING
#: An integer slot's bytes: JSON's integer, small enough for every parser.
_INT: Final = rb"-?(?:0|[1-9][0-9]{0,15})"
#: How many times in a row a template may fail to be made before learning backs off.
_MAX_BACKOFF: Final = 64


@dataclass(frozen=True, slots=True)
class Slots:
    """Where a plain event's values vary without the observer noticing.

    Attributes:
        text: non-empty strings (the text a delta carries).
        ignored: strings or integers the observer never reads (a sequence
            number, padding), of the exemplar's type.
    """

    text: tuple[Path, ...] = ()
    ignored: tuple[Path, ...] = ()


def _get(value: object, path: Path) -> object:
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or not 0 <= step < len(value):
                return None
            value = value[step]
        else:
            if not isinstance(value, dict) or step not in value:
                return None
            value = value[step]
    return value


def _set(value: object, path: Path, new: object) -> object:
    """A copy of ``value`` with ``new`` at ``path`` (the rest shared)."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(value, list) and isinstance(step, int):
        copy = list(value)
        copy[step] = _set(copy[step], rest, new)
        return copy
    assert isinstance(value, dict) and isinstance(step, str)
    copied = dict(value)
    copied[step] = _set(copied[step], rest, new)
    return copied


def same_json(a: object, b: object) -> bool:
    """Equal as JSON values, types included (``1 != 1.0 != True`` here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


class Template(Protocol):
    """A plain event's bytes with its slots open (:class:`EventTemplate`, or a framing's own)."""

    @property
    def output(self) -> bool:
        """What the observer returned for the exemplar (and returns for every match)."""
        ...

    def consumed(self, data: bytes) -> tuple[int, int]:
        """How many whole events at the start of ``data`` match, and where they end."""
        ...


#: How a framing makes a template from one event's raw bytes: ``(raw, event,
#: parsed, slots, output)``, where ``raw`` carried exactly ``event`` and
#: ``parsed`` is its data parsed; None when the bytes do not fit one.
TemplateMaker = Callable[[bytes, SSEEvent, Json, Slots, bool], "Template | None"]


class BoundaryDecoder(Protocol):
    """What a decoder tells about its state for templates to be used on it."""

    @property
    def at_event_boundary(self) -> bool:
        """Nothing is held between events: the next bytes start an event."""
        ...

    @property
    def max_pending_bytes(self) -> int:
        """Chunks longer than this are left to the decoder (its bound decides)."""
        ...


@dataclass(frozen=True, slots=True)
class Shape:
    """Bytes with slots open: ``literals[0]``, a slot, ``literals[1]``, ..., a
    slot, ``literals[-1]``.

    A slot's pattern is greedy and never backtracks into the literal after it:
    a string slot stops at its first unescaped quote, where the next literal
    begins (that literal starts with the closing quote); an integer slot at
    its last digit (the probe proved the next literal starts with no digit,
    point or exponent).

    Attributes:
        literals: the bytes around the slots.
        slots: each slot's compiled pattern (its ``match``).
    """

    literals: tuple[bytes, ...]
    patterns: tuple[bytes, ...]

    @property
    def slots(self) -> tuple[Callable[[bytes, int], re.Match[bytes] | None], ...]:
        """Each slot's pattern, compiled (its ``match``)."""
        return tuple(_SLOT_MATCH[p] for p in self.patterns)

    def around(self, before: bytes, after: bytes) -> Shape:
        """The shape with ``before`` and ``after`` added to its ends."""
        if len(self.literals) == 1:
            return Shape((before + self.literals[0] + after,), self.patterns)
        literals = (before + self.literals[0], *self.literals[1:-1], self.literals[-1] + after)
        return Shape(literals, self.patterns)

    def compiled(self) -> re.Pattern[bytes]:
        """The whole shape as one pattern: the same matches as :meth:`end` (each
        slot stops where :meth:`end`'s does, so backtracking finds nothing
        else), in one call; compiling costs about a millisecond, so a template
        compiles it only once it has matched many events."""
        key = (self.literals, self.patterns)
        pattern = _COMPILED.get(key)
        if pattern is None:
            pieces = [re.escape(self.literals[0])]
            for slot, literal in zip(self.patterns, self.literals[1:], strict=True):
                pieces += [slot, re.escape(literal)]
            if len(_COMPILED) >= 64:
                _COMPILED.clear()
            pattern = _COMPILED[key] = re.compile(b"".join(pieces))
        return pattern

    def end(self, data: bytes, pos: int) -> int:
        """Where one match starting at ``pos`` ends, or -1."""
        literals = self.literals
        if not data.startswith(literals[0], pos):
            return -1
        pos += len(literals[0])
        for slot, literal in zip(self.slots, literals[1:], strict=True):
            hit = slot(data, pos)
            if hit is None:
                return -1
            pos = hit.end()
            if not data.startswith(literal, pos):
                return -1
            pos += len(literal)
        return pos


_SLOT_MATCH: Final = {regex: re.compile(regex).match for regex in (_TEXT, _STRING, _INT)}


def json_shape(body: bytes, parsed: Json, slots: Slots) -> Shape | None:
    """One JSON object's bytes with the slots open, or None.

    Made only when ``body`` with probe values in the slots parses to ``parsed``
    with exactly those values at the slots' paths (see the module docstring).

    Args:
        body: the object's bytes, as they came.
        parsed: the object those bytes parse to.
        slots: what may vary.
    """
    spans: list[tuple[int, int, bytes, object, Path]] = []
    kinds = [(p, True) for p in slots.text] + [(p, False) for p in slots.ignored]
    for path, text in kinds:
        span = _span(body, path, _get(parsed, path), text)
        if span is None:
            return None
        spans.append(span)
    spans.sort(key=lambda span: span[0])
    if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
        return None
    literals, opened, at = [], [], 0
    for start, end, regex, _, path in spans:
        literals.append(body[at:start])
        opened.append((path, regex))
        at = end
    literals.append(body[at:])
    key = (tuple(literals), tuple(opened))
    if key in _PROVEN:
        return _PROVEN[key]
    # The probe: the bytes with other values in the slots must parse to the
    # object with exactly those values at the slots' paths. What it proves
    # holds for every object these literals and slots spell (the tokens are
    # the same whatever the slots hold), so the answer is kept for them.
    probe, expected = literals[0], parsed
    for (path, regex), literal in zip(opened, literals[1:], strict=True):
        value: object = 7 if regex == _INT else "q"
        probe += (b"7" if regex == _INT else b"q") + literal
        expected = _set(expected, path, value)  # type: ignore[assignment]
    try:
        proven = same_json(orjson.loads(probe), expected)
    except orjson.JSONDecodeError:
        proven = False
    shape = Shape(tuple(literals), tuple(r for _, r in opened)) if proven else None
    if len(_PROVEN) >= 256:
        _PROVEN.clear()
    _PROVEN[key] = shape
    return shape


#: Shapes compiled whole, by literals and slot patterns.
_COMPILED: dict[tuple[tuple[bytes, ...], tuple[bytes, ...]], re.Pattern[bytes]] = {}
#: Matches a template counts before it compiles its shape whole.
COMPILE_AFTER: Final = 32

#: What the probe proved (None: not provable), by literals and slots.
_PROVEN: dict[tuple[tuple[bytes, ...], tuple[tuple[Path, bytes], ...]], Shape | None] = {}


def _heads(event: SSEEvent, nl: bytes) -> tuple[bytes, ...]:
    """The line(s) before an event's JSON in the forms a template accepts."""
    if event.event is None:
        return (b"data: ", b"data:")
    name = event.event.encode()
    return tuple(
        b"event" + s + name + nl + b"data:" + t for s in (b": ", b":") for t in (b" ", b"")
    )


class EventTemplate:
    """One plain SSE event's bytes with its slots open.

    Args:
        shape: one event of this shape, its field lines and blank line included.
        output: what the observer returned for the exemplar (and returns for
            every match).
    """

    __slots__ = ("_match", "_seen", "output", "shape")

    def __init__(self, shape: Shape, output: bool) -> None:
        self.shape = shape
        self.output = output
        self._seen = 0
        self._match: Callable[[bytes, int], re.Match[bytes] | None] | None = None

    def consumed(self, data: bytes) -> tuple[int, int]:
        """How many whole events at the start of ``data`` match, and where they end."""
        pos, count, size = 0, 0, len(data)
        match = self._match
        if match is not None:
            while pos < size:
                hit = match(data, pos)
                if hit is None:
                    break
                pos, count = hit.end(), count + 1
            return count, pos
        end = self.shape.end
        while pos < size:
            after = end(data, pos)
            if after < 0:
                break
            pos, count = after, count + 1
        self._seen += count
        if self._seen >= COMPILE_AFTER:
            self._match = self.shape.compiled().match
        return count, pos

    @classmethod
    def make(
        cls, raw: bytes, event: SSEEvent, parsed: Json, slots: Slots, output: bool
    ) -> EventTemplate | None:
        """A template from one SSE event's raw bytes, or None when they do not fit one.

        Args:
            raw: exactly the bytes that carried ``event`` (and nothing else).
            event: the event as decoded.
            parsed: its data, parsed.
            slots: what the observer said may vary (:meth:`plain_slots`).
            output: what the observer returned for it.
        """
        nl = b"\r\n" if raw.endswith(b"\r\n\r\n") else b"\n"
        if not raw.endswith(nl + nl):
            return None
        for head in _heads(event, nl):
            body = raw[len(head) : len(raw) - 2 * len(nl)]
            if (
                raw.startswith(head)
                and b"\n" not in body
                and b"\r" not in body
                and body.decode("utf-8", "replace") == event.data
            ):
                break
        else:
            return None
        shape = json_shape(body, parsed, slots)
        if shape is None:
            return None
        return cls(shape.around(head, nl + nl), output)


def _span(
    body: bytes, path: Path, value: object, text: bool
) -> tuple[int, int, bytes, object, Path] | None:
    """Where a slot's value sits in ``body`` (its bytes, inside any quotes), the
    slot's pattern, the exemplar's value and the path."""
    key = path[-1] if path else None
    if not isinstance(key, str):
        return None
    if isinstance(value, str) and (value or not text):
        token, regex = orjson.dumps(value), _TEXT if text else _STRING
        inner = 1  # the span is inside the quotes
    elif isinstance(value, int) and not isinstance(value, bool) and not text:
        token, regex, inner = str(value).encode(), _INT, 0
    else:
        return None
    found = []
    for colon in (b":", b": "):
        needle = orjson.dumps(key) + colon + token
        start = body.find(needle)
        if start >= 0 and body.find(needle, start + 1) < 0:
            found.append(start + len(needle) - len(token))
    if len(found) != 1:
        return None
    start = found[0] + inner
    return start, start + len(token) - 2 * inner, regex, value, path


class Learner:
    """A stream's template and when to try making one: after an event decoded in
    full, backing off (up to every 64th chunk) while tries make no template or
    make templates nothing matches (a field that changes every event).

    Args:
        decoder: the stream's decoder.
        make: its framing's template maker.
    """

    __slots__ = ("_hit", "_skip", "_wait", "decoder", "make", "template")

    def __init__(self, decoder: BoundaryDecoder, make: TemplateMaker) -> None:
        self.decoder = decoder
        self.make = make
        self.template: Template | None = None
        self._hit = False
        self._skip = 0
        self._wait = 0

    def counted(self) -> None:
        """The template matched events: it was worth making."""
        self._hit = True
        self._skip = 0

    def drop(self) -> None:
        """The decoder moves on: the template holds no longer."""
        if self.template is not None and not self._hit:
            self._back_off()
        self.template = None

    def ready(self) -> bool:
        """Whether the next whole event decoded in full should be tried as an exemplar."""
        if self._wait:
            self._wait -= 1
            return False
        return True

    def learned(self, template: Template | None) -> None:
        """The result of one try."""
        self.template, self._hit = template, False
        if template is None:
            self._back_off()

    def _back_off(self) -> None:
        self._skip = min(2 * self._skip + 1, _MAX_BACKOFF)
        self._wait = self._skip
