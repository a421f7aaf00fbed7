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

import enum
import json
import math
import numbers
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
    "require_json",
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
    text = _json_text(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _json_text(value: Any) -> str:
    """``value`` written as JSON, matchers as code writes them, and a number no
    double can hold as ``Infinity`` (orjson would write ``null``: another value)."""
    if isinstance(value, Matcher):
        return value.describe()
    if _not_finite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return (
            "{" + ",".join(f"{_json_text(str(k))}:{_json_text(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    try:
        return orjson.dumps(to_json(value)).decode()
    except TypeError:
        return repr(value)


def _is_number(value: Any) -> bool:
    # JSON keeps true/false apart from numbers; Python's bool is an int. An
    # IntEnum, a Fraction, numpy's numbers (numbers.Real) and a Decimal stand for one.
    return isinstance(value, numbers.Real | Decimal) and not isinstance(value, bool)


def _not_finite(value: Any) -> bool:
    if isinstance(value, Decimal):
        return not value.is_finite()
    return isinstance(value, float) and not math.isfinite(value)


def require_json(expected: Any) -> Any:
    """``expected`` itself, once it is sure to be something a JSON argument can equal.

    Raises:
        ValueError: it holds NaN or an infinity, which no JSON value is (it would
            never match, and a verdict's JSON would write it as ``null``).
    """
    if isinstance(expected, Matcher):
        return expected
    if _not_finite(expected):
        raise ValueError(
            f"{expected!r} is no JSON value (JSON has no NaN or infinity): it can never match"
        )
    if isinstance(expected, Mapping):
        for value in expected.values():
            require_json(value)
    elif isinstance(expected, list | tuple):
        for value in expected:
            require_json(value)
    return expected


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
        if isinstance(expected, Decimal) and isinstance(actual, float):
            # Decimal("0.1") is the 0.1 the model wrote, not the double nearest to it.
            return bool(expected == Decimal(repr(actual)))
        return bool(expected == actual)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, str) or isinstance(actual, str):
        # A StrEnum member is the text it stands for.
        return isinstance(expected, str) and isinstance(actual, str) and expected == actual
    if expected is None or actual is None:
        return expected is None and actual is None
    return type(expected) is type(actual) and bool(expected == actual)


# --------------------------------------------------------------------------
# The matchers


class _Approx(Matcher):
    __slots__ = ("abs", "expected", "rel")

    def __init__(self, expected: float, rel: float, abs: float) -> None:
        if not _is_number(expected) or not math.isfinite(float(expected)):
            raise ValueError("approx() takes a finite number")
        if rel < 0 or abs < 0:
            raise ValueError("approx() tolerances must not be negative")
        if math.isnan(rel) or math.isnan(abs):
            raise ValueError("approx() tolerances must be numbers, not NaN")
        self.expected, self.rel, self.abs = expected, rel, abs

    def mismatch(self, actual: Any, where: str) -> str | None:
        if actual is INVALID_JSON or not _is_number(actual):
            return f"{where} mismatch: expected {self.describe()}, got {shown(actual)}"
        expected, value = float(self.expected), float(actual)
        tolerance = max(self.rel * math.fabs(expected), self.abs)
        # A value written at the very edge (0.75075 for approx(0.75, rel=1e-3))
        # lands a rounding error past it in binary: a few ulps are not a miss.
        slack = 4 * math.ulp(max(math.fabs(value), math.fabs(expected)))
        if math.fabs(value - expected) <= tolerance + slack:
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


#: A number as people write it: digits, in groups of three when a thousands
#: separator (``,`` or ``_``) is used, a fraction, an exponent (text is case-folded
#: first). ``3, 4`` is two numbers and ``1,5`` is not fifteen.
_NUMBER: Final = re.compile(r"(?:\d{1,3}(?:[,_]\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:e[+-]?\d+)?")


def _canonical_number(token: str) -> str:
    """One spelling per number: no separators, no trailing zeros in a fraction, an
    exponent worked out. Leading zeros stay: ``02139`` is a code, not 2139."""
    digits = token.replace(",", "").replace("_", "")
    if "e" in digits:
        try:
            value = Decimal(digits)
        except InvalidOperation:
            return token
        return format(value.normalize(), "f") if value.is_finite() else token
    whole, _, fraction = digits.partition(".")
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def fuzzy_text(value: Any) -> str | None:
    """What :func:`fuzzy` compares: the text case-folded, every number written
    one way (:func:`_canonical_number`), then without white space (numbers are
    read first, so the space in ``3 4`` still parts them). ``None`` for a value
    that is not text or a number."""
    if isinstance(value, bool) or value is None:
        return None
    if _is_number(value):
        if not math.isfinite(float(value)):
            return None
        text = str(value) if isinstance(value, Decimal) else repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    numbered = _NUMBER.sub(lambda m: _canonical_number(m.group()), text.casefold())
    return "".join(numbered.split())


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
        self.part = require_json(part)

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
        self.values = tuple(require_json(v) for v in values)

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
        self.value = require_json(value)

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
    if isinstance(expected, enum.Enum):
        return to_json(expected.value)
    if _is_number(expected) and not isinstance(expected, int | float):
        # A Decimal, a Fraction, numpy's numbers: JSON's own kind of number.
        return int(expected) if isinstance(expected, numbers.Integral) else float(expected)
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


#: Digits enough for an integer past 64 bits, which orjson reads as a float.
_LONG_DIGITS: Final = re.compile(r"\d{19}")


def decode_arguments(arguments: str | None) -> Any:
    """A call's arguments decoded, :data:`INVALID_JSON` when they are not JSON
    (or were not recorded).

    Values are compared exactly, so the few arguments orjson cannot read
    exactly are read by the standard library instead: integers past 64 bits
    (orjson makes them floats) and numbers past a double (``1e400``, valid
    JSON that orjson refuses). ``NaN`` and ``Infinity`` are not JSON either way.
    """
    if arguments is None:
        return INVALID_JSON
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return _exactly(arguments)
    return _exactly(arguments) if _LONG_DIGITS.search(arguments) else value


def _exactly(arguments: str) -> Any:
    def not_json(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(arguments, parse_constant=not_json)
    except (ValueError, RecursionError):
        return INVALID_JSON
