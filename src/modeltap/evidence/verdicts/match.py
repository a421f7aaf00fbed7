"""Matchers for tool-call arguments (``modeltap.match``), pure.

A tool call's arguments are JSON text as the model sent it. They are decoded
once, then each asserted argument is compared with what the test gave:

* a **plain value** matches by equality after decoding, as JSON means it:
  ``500`` equals ``500.0``; ``true`` is not ``1``; a dict must have the same
  keys, a list the same length; matchers may stand anywhere inside them;
* :func:`approx` (numbers within a tolerance), :func:`fuzzy` (text that
  ignores case, spaces and number formatting: ``"181,001"``, ``"181001"``
  and ``181001.0`` match), :func:`regex` (``re.search``), :func:`anything`,
  :func:`contains` (a dict's subset, a list's member, a string's substring),
  :func:`one_of` and :func:`equals` (a literal, for a case file's table that
  looks like a matcher).

Arguments that are not valid JSON match only :func:`anything`, and the
mismatch says so. Every mismatch is a short text in modeltap's words naming
the argument's path (``arg 'order.id'``): it is what a failed verdict shows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import orjson

__all__ = [
    "INVALID_JSON",
    "Matcher",
    "anything",
    "approx",
    "contains",
    "decode_arguments",
    "describe",
    "equals",
    "fuzzy",
    "mismatch",
    "one_of",
    "regex",
    "to_json",
]

#: What a call's arguments decode to when they are not valid JSON.
INVALID_JSON: Final = object()
#: Longest value quoted whole in a mismatch; longer ones are cut.
_SHOWN: Final = 80


def shown(value: Any) -> str:
    """A value as a mismatch quotes it: JSON, cut to a readable length."""
    if value is INVALID_JSON:
        return "arguments that are not valid JSON"
    if isinstance(value, Matcher):
        return value.describe()
    try:
        text = orjson.dumps(value, default=_matcher_json).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _matcher_json(value: Any) -> Any:
    if isinstance(value, Matcher):
        return value.to_json()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError


def _is_number(value: Any) -> bool:
    # JSON keeps true/false apart from numbers; Python's bool is an int.
    return isinstance(value, int | float) and not isinstance(value, bool)


class Matcher:
    """An expectation about one decoded argument value.

    Subclasses say what they accept (:meth:`mismatch`), how a reason names
    them (:meth:`describe`) and how a verdict's JSON shows them (:meth:`to_json`).
    """

    __slots__ = ()

    def mismatch(self, actual: Any, where: str) -> str | None:
        """Why ``actual`` does not match, or ``None`` when it does.

        Args:
            actual: the decoded value (:data:`INVALID_JSON` for arguments
                that were not JSON).
            where: the argument's path, for the text (``arg 'a'``).
        """
        raise NotImplementedError

    def describe(self) -> str:
        """The matcher as code would write it: ``approx(1.5, rel=1e-06)``."""
        raise NotImplementedError

    def to_json(self) -> Any:
        """The matcher as a case file writes it: ``{"approx": 1.5}``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.describe()


def mismatch(expected: Any, actual: Any, where: str = "value") -> str | None:
    """Why ``actual`` does not match ``expected`` (a plain value or a matcher).

    Args:
        expected: a plain JSON-like value (dicts, lists, tuples, str,
            numbers, bool, None) in which matchers may stand anywhere, or a
            :class:`Matcher`.
        actual: the decoded value (:data:`INVALID_JSON` when it was not JSON).
        where: the value's path for the text (``arg 'amount'``).

    Returns:
        ``None`` when it matches, else a short reason naming ``where``.
    """
    if isinstance(expected, Matcher):
        return expected.mismatch(actual, where)
    if actual is INVALID_JSON:
        return f"{where}: the call's arguments are not valid JSON (only anything() matches them)"
    if isinstance(expected, Mapping):
        if not isinstance(actual, dict):
            return f"{where} mismatch: expected an object {shown(expected)}, got {shown(actual)}"
        missing = [k for k in expected if k not in actual]
        extra = [k for k in actual if k not in expected]
        if missing or extra:
            said = [f"missing {', '.join(map(repr, missing))}"] if missing else []
            said += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
            return f"{where} mismatch: keys differ ({'; '.join(said)}; use contains() for a subset)"
        for key, value in expected.items():
            found = mismatch(value, actual[key], _child(where, key))
            if found is not None:
                return found
        return None
    if isinstance(expected, list | tuple):
        if not isinstance(actual, list):
            return f"{where} mismatch: expected a list {shown(expected)}, got {shown(actual)}"
        if len(expected) != len(actual):
            return (
                f"{where} mismatch: expected {len(expected)} items, got {len(actual)}: "
                f"{shown(actual)}"
            )
        for i, (value, item) in enumerate(zip(expected, actual, strict=True)):
            found = mismatch(value, item, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if _json_equal(expected, actual):
        return None
    return f"{where} mismatch: expected {shown(expected)}, got {shown(actual)}"


def _child(where: str, key: str) -> str:
    """``arg 'order'`` + ``id`` -> ``arg 'order.id'``."""
    if where.startswith("arg '") and where.endswith("'"):
        return f"{where[:-1]}.{key}'"
    return f"{where}.{key}"


def _json_equal(expected: Any, actual: Any) -> bool:
    """Scalar equality as JSON means it (numbers by value, bool and null apart)."""
    if _is_number(expected) and _is_number(actual):
        return bool(expected == actual)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if expected is None or actual is None:
        return expected is None and actual is None
    return type(expected) is type(actual) and bool(expected == actual)


# --------------------------------------------------------------------------
# The matchers


class _Approx(Matcher):
    __slots__ = ("abs", "expected", "rel")

    def __init__(self, expected: float, rel: float, abs: float) -> None:
        if not _is_number(expected) or not math.isfinite(expected):
            raise ValueError("approx() takes a finite number")
        if rel < 0 or abs < 0:
            raise ValueError("approx() tolerances must not be negative")
        self.expected, self.rel, self.abs = expected, rel, abs

    def mismatch(self, actual: Any, where: str) -> str | None:
        if actual is INVALID_JSON or not _is_number(actual):
            return f"{where} mismatch: expected {self.describe()}, got {shown(actual)}"
        tolerance = max(self.rel * math.fabs(self.expected), self.abs)
        if math.fabs(actual - self.expected) <= tolerance:
            return None
        return f"{where} mismatch: expected {self.describe()}, got {shown(actual)}"

    def describe(self) -> str:
        extra = f", abs={self.abs!r}" if self.abs else ""
        return f"approx({self.expected!r}, rel={self.rel!r}{extra})"

    def to_json(self) -> Any:
        if self.rel == 1e-6 and not self.abs:
            return {"approx": self.expected}
        return {"approx": self.expected, "rel": self.rel, "abs": self.abs}


def approx(expected: float, rel: float = 1e-6, abs: float = 0.0) -> Matcher:
    """A number within ``max(rel * |expected|, abs)`` of ``expected``.

    Raises:
        ValueError: ``expected`` is not a finite number, or a tolerance is negative.
    """
    return _Approx(expected, rel, abs)


#: A number as people write it: digits with thousands separators, a fraction.
_NUMBER: Final = re.compile(r"\d[\d,_]*(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _canonical_number(token: str) -> str:
    try:
        value = Decimal(token.replace(",", "").replace("_", ""))
    except InvalidOperation:
        return token
    if not value.is_finite():
        return token
    return format(value.normalize(), "f")


def fuzzy_text(value: Any) -> str | None:
    """What :func:`fuzzy` compares: the text lower-cased, without white space,
    every number written one way (no separators, no trailing zeros). ``None``
    for a value that is not text or a number."""
    if isinstance(value, bool) or value is None:
        return None
    if _is_number(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    squeezed = "".join(text.casefold().split())
    return _NUMBER.sub(lambda m: _canonical_number(m.group()), squeezed)


class _Fuzzy(Matcher):
    __slots__ = ("expected", "key")

    def __init__(self, expected: str | float) -> None:
        key = fuzzy_text(expected)
        if key is None:
            raise ValueError("fuzzy() takes a string or a number")
        self.expected, self.key = expected, key

    def mismatch(self, actual: Any, where: str) -> str | None:
        if actual is not INVALID_JSON and fuzzy_text(actual) == self.key:
            return None
        return f"{where} mismatch: expected {self.describe()}, got {shown(actual)}"

    def describe(self) -> str:
        return f"fuzzy({self.expected!r})"

    def to_json(self) -> Any:
        return {"fuzzy": self.expected}


def fuzzy(expected: str | float) -> Matcher:
    """Text equal to ``expected`` ignoring case, white space and number
    formatting (``"181,001"``, ``"181001"`` and ``181001.0`` are one value).

    Raises:
        ValueError: ``expected`` is neither text nor a number.
    """
    return _Fuzzy(expected)


class _Regex(Matcher):
    __slots__ = ("pattern",)

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise ValueError("regex() takes a pattern string")
        try:
            self.pattern = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"regex() pattern does not compile: {e}") from None

    def mismatch(self, actual: Any, where: str) -> str | None:
        if isinstance(actual, str) and self.pattern.search(actual) is not None:
            return None
        what = "a string" if not isinstance(actual, str) else "text"
        return f"{where} mismatch: expected {what} matching {self.describe()}, got {shown(actual)}"

    def describe(self) -> str:
        return f"regex({self.pattern.pattern!r})"

    def to_json(self) -> Any:
        return {"regex": self.pattern.pattern}


def regex(pattern: str) -> Matcher:
    """A string in which ``pattern`` is found (``re.search``; anchor it with ``^…$``).

    Raises:
        ValueError: the pattern does not compile.
    """
    return _Regex(pattern)


class _Anything(Matcher):
    __slots__ = ()

    def mismatch(self, actual: Any, where: str) -> str | None:
        return None

    def describe(self) -> str:
        return "anything()"

    def to_json(self) -> Any:
        return {"anything": True}


def anything() -> Matcher:
    """Any value, even arguments that are not valid JSON (the argument must be there)."""
    return _Anything()


class _Contains(Matcher):
    __slots__ = ("part",)

    def __init__(self, part: Any) -> None:
        self.part = part

    def mismatch(self, actual: Any, where: str) -> str | None:
        part = self.part
        if isinstance(actual, dict) and isinstance(part, Mapping):
            for key, value in part.items():
                if key not in actual:
                    return f"{where} mismatch: {self.describe()}: no key {key!r} in {shown(actual)}"
                found = mismatch(value, actual[key], _child(where, key))
                if found is not None:
                    return found
            return None
        if isinstance(actual, list):
            if any(mismatch(part, item, where) is None for item in actual):
                return None
            return f"{where} mismatch: {self.describe()}: no such item in {shown(actual)}"
        if isinstance(actual, str) and isinstance(part, str):
            if part in actual:
                return None
            return f"{where} mismatch: {self.describe()}: not in {shown(actual)}"
        return f"{where} mismatch: expected {self.describe()}, got {shown(actual)}"

    def describe(self) -> str:
        return f"contains({shown(self.part)})"

    def to_json(self) -> Any:
        return {"contains": to_json(self.part)}


def contains(part: Any) -> Matcher:
    """A dict holding ``part``'s keys (values matched, extra keys allowed), a
    list with an item matching ``part``, or a string with ``part`` in it."""
    return _Contains(part)


class _OneOf(Matcher):
    __slots__ = ("values",)

    def __init__(self, values: Sequence[Any]) -> None:
        if not values:
            raise ValueError("one_of() takes at least one value")
        self.values = tuple(values)

    def mismatch(self, actual: Any, where: str) -> str | None:
        if any(mismatch(value, actual, where) is None for value in self.values):
            return None
        return f"{where} mismatch: expected {self.describe()}, got {shown(actual)}"

    def describe(self) -> str:
        return f"one_of({', '.join(shown(v) for v in self.values)})"

    def to_json(self) -> Any:
        return {"one_of": [to_json(v) for v in self.values]}


def one_of(*values: Any) -> Matcher:
    """Any one of ``values`` (each a plain value or a matcher).

    Raises:
        ValueError: no value was given.
    """
    return _OneOf(values)


class _Equals(Matcher):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def mismatch(self, actual: Any, where: str) -> str | None:
        return mismatch(self.value, actual, where)

    def describe(self) -> str:
        return f"equals({shown(self.value)})"

    def to_json(self) -> Any:
        return {"equals": to_json(self.value)}


def equals(value: Any) -> Matcher:
    """``value`` itself, by the plain-value rule (a dict that looks like a
    matcher, ``{"regex": "x"}``, is then just a dict)."""
    return _Equals(value)


def to_json(expected: Any) -> Any:
    """An expectation as a verdict's JSON shows it: matchers as their one-key
    tables (``{"fuzzy": "181001"}``), plain values as they are."""
    if isinstance(expected, Matcher):
        return expected.to_json()
    if isinstance(expected, Mapping):
        return {str(k): to_json(v) for k, v in expected.items()}
    if isinstance(expected, list | tuple):
        return [to_json(v) for v in expected]
    return expected


def describe(expected: Any) -> str:
    """An expectation as a verdict's name writes it (``approx(1.5, rel=1e-06)``, ``500``)."""
    if isinstance(expected, Matcher):
        return expected.describe()
    if isinstance(expected, Mapping):
        inner = ", ".join(f"{k!r}: {describe(v)}" for k, v in expected.items())
        return "{" + inner + "}"
    if isinstance(expected, list | tuple):
        return "[" + ", ".join(describe(v) for v in expected) + "]"
    return repr(expected)


def decode_arguments(arguments: str | None) -> Any:
    """A call's arguments decoded, :data:`INVALID_JSON` when they are not JSON
    (or were not recorded)."""
    if arguments is None:
        return INVALID_JSON
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return INVALID_JSON
