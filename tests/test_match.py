"""The argument matchers of ``modeltap.match``: examples and properties (hypothesis)."""

from __future__ import annotations

import enum
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from modeltap import match
from modeltap.evidence.coverage import EvidenceCoverage
from modeltap.evidence.verdicts import Expect, Scope
from modeltap.evidence.verdicts.cases import _expectation as cases_expectation
from modeltap.evidence.verdicts.match import (
    INVALID_JSON,
    decode_arguments,
    describe,
    mismatch,
    require_json,
    to_json,
)

#: JSON values as a model's arguments decode to.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def matches(expected: Any, arguments: str) -> bool:
    return mismatch(expected, decode_arguments(arguments), "arg 'x'") is None


@given(JSON)
def test_a_plain_value_matches_itself_after_a_json_round_trip(value: Any) -> None:
    assert mismatch(value, orjson.loads(orjson.dumps(value))) is None


@given(st.integers(-(10**15), 10**15))
def test_numbers_match_by_value_not_by_spelling(n: int) -> None:
    assert matches(n, orjson.dumps(float(n)).decode())
    assert matches(float(n), str(n))
    assert not matches(n, orjson.dumps(str(n)).decode())  # a string is not a number


@given(st.booleans())
def test_json_keeps_booleans_apart_from_numbers(flag: bool) -> None:
    assert not matches(int(flag), orjson.dumps(flag).decode())
    assert not matches(flag, str(int(flag)))
    assert matches(flag, orjson.dumps(flag).decode())


@given(st.integers(0, 10**12), st.sampled_from(["{:,}", "{}", "{}.0", "{:_}", " {:,} "]))
def test_fuzzy_ignores_number_formatting(n: int, spelling: str) -> None:
    written = spelling.format(n)
    assert match.fuzzy(written).mismatch(n, "x") is None
    assert match.fuzzy(n).mismatch(written, "x") is None
    assert match.fuzzy(f"{n:,}").mismatch(float(n), "x") is None


@given(st.text(alphabet=st.characters(categories=["L", "N", "Zs"]), max_size=30))
def test_fuzzy_ignores_case_and_spaces(text: str) -> None:
    noisy = "  ".join(text.upper().split()) + " "
    # Caseless as Unicode defines it (casefold): a dotless i upper-cases to I, another letter.
    assume(noisy.casefold().split() == text.casefold().split())
    assert match.fuzzy(text).mismatch(noisy, "x") is None


@given(st.integers(0, 10**9), st.integers(1, 10**6))
def test_fuzzy_still_tells_numbers_apart(n: int, delta: int) -> None:
    assert match.fuzzy(n).mismatch(f"{n + delta:,}", "x") is not None


def test_approx_accepts_a_value_written_at_the_edge_of_its_tolerance() -> None:
    assert match.approx(0.75, rel=1e-3).mismatch(0.75075, "x") is None
    assert match.approx(0.75, rel=1e-3).mismatch(0.7507501, "x") is not None
    assert match.approx(500, abs=0.1).mismatch(500.1, "x") is None


@given(st.floats(-1e12, 1e12, allow_nan=False), st.floats(0, 1))
def test_approx_accepts_what_is_within_its_tolerance(x: float, fraction: float) -> None:
    tolerance = 1e-3 * abs(x)
    assert match.approx(x, rel=1e-3).mismatch(x + fraction * tolerance, "x") is None
    if tolerance > 0 and math.isfinite(x * 1.01):
        assert match.approx(x, rel=1e-3).mismatch(x + 2 * tolerance + 1e-9, "x") is not None


@given(st.dictionaries(st.text(max_size=6), JSON, max_size=5), st.data())
def test_contains_accepts_every_subset_of_a_dict(
    whole: dict[str, Any], data: st.DataObject
) -> None:
    keys = data.draw(
        st.lists(st.sampled_from(sorted(whole)), unique=True) if whole else st.just([])
    )
    assert match.contains({k: whole[k] for k in keys}).mismatch(whole, "x") is None


@given(st.lists(JSON, min_size=1, max_size=5), st.data())
def test_contains_finds_a_member_and_one_of_a_choice(items: list[Any], data: st.DataObject) -> None:
    member = data.draw(st.sampled_from(items))
    assert match.contains(member).mismatch(items, "x") is None
    assert match.one_of(*items).mismatch(member, "x") is None


@given(st.text(max_size=20), st.text(max_size=5), st.text(max_size=5))
def test_contains_finds_a_substring(middle: str, before: str, after: str) -> None:
    assert match.contains(middle).mismatch(before + middle + after, "x") is None


@given(st.text(max_size=40))
def test_arguments_that_are_not_json_match_only_anything(garbage: str) -> None:
    try:
        orjson.loads(garbage)
    except orjson.JSONDecodeError:
        pass
    else:
        return
    assert decode_arguments(garbage) is INVALID_JSON
    assert match.anything().mismatch(INVALID_JSON, "x") is None
    for expected in (garbage, match.fuzzy("x"), match.contains("x"), {}, match.regex(".*")):
        said = mismatch(expected, INVALID_JSON, "arg 'x'")
        assert said is not None
        if not isinstance(expected, match.Matcher) or "contains" in repr(expected):
            assert "not valid JSON" in said or "got arguments that are not valid JSON" in said


def test_matchers_nest_inside_dicts_and_lists() -> None:
    args = '{"order": {"id": "o-181", "lines": [{"sku": "A", "qty": 2.0}]}, "amount": "181,001"}'
    expected = {
        "id": match.regex(r"^o-\d+$"),
        "lines": [{"sku": match.one_of("A", "B"), "qty": 2}],
    }
    assert matches(expected, '{"id": "o-181", "lines": [{"sku": "A", "qty": 2.0}]}')
    assert matches(match.contains({"order": match.contains({"id": "o-181"})}), args)
    said = mismatch({"id": "o-182", "lines": []}, orjson.loads(args)["order"], "arg 'order'")
    assert said == 'arg \'order.id\' mismatch: expected "o-182", got "o-181"'
    keys = mismatch({"id": "o-181"}, orjson.loads(args)["order"], "arg 'order'")
    assert keys is not None and "unexpected 'lines'" in keys and "contains()" in keys


def test_equals_is_a_literal_and_to_json_writes_matchers_as_tables() -> None:
    literal = {"regex": "^x"}
    assert match.equals(literal).mismatch({"regex": "^x"}, "x") is None
    assert match.equals(literal).mismatch("xyz", "x") is not None
    assert to_json({"a": match.fuzzy("181001"), "b": [match.anything(), 1]}) == {
        "a": {"fuzzy": "181001"},
        "b": [{"anything": True}, 1],
    }
    assert to_json(match.approx(1.5)) == {"approx": 1.5}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: match.regex("("), "does not compile"),
        (lambda: match.approx(math.inf), "finite number"),
        (lambda: match.fuzzy(None), "string or a number"),  # type: ignore[arg-type]
        (lambda: match.one_of(), "at least one"),
    ],
)
def test_a_matcher_that_cannot_mean_anything_is_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


@given(st.one_of(st.integers(min_value=2**64), st.integers(max_value=-(2**63) - 1)))
def test_integers_beyond_64_bits_match_exactly(n: int) -> None:
    """orjson reads such integers as floats: the arguments are read exactly instead."""
    arguments = orjson.dumps({"id": str(n)}).decode().replace(f'"{n}"', str(n))
    assert decode_arguments(arguments) == {"id": n}
    assert matches({"id": n}, arguments)
    assert not matches({"id": n + 1}, arguments)
    assert match.fuzzy(str(n)).mismatch(decode_arguments(str(n)), "x") is None


def test_numbers_beyond_a_double_are_json_not_garbage() -> None:
    said = mismatch(1.0, decode_arguments('{"x": 1e400}')["x"], "arg 'x'")
    assert said == "arg 'x' mismatch: expected 1.0, got Infinity"
    assert decode_arguments("NaN") is INVALID_JSON  # not JSON, whatever Python's json says
    assert decode_arguments('{"x": Infinity}') is INVALID_JSON


NOWHERE = Expect(Scope("nowhere", (), (), EvidenceCoverage(), None))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, Decimal("NaN")])
def test_a_value_no_json_argument_can_hold_is_refused(value: float) -> None:
    """JSON has no NaN and no infinity: an expectation of one would never match, and
    would be written as null in the verdict's JSON."""
    for make in (
        lambda: require_json({"a": [value]}),
        lambda: NOWHERE.tool_called("refund", amount=value),
        lambda: NOWHERE.tool_called("refund", order={"lines": [value]}),
        lambda: match.one_of(1, value),
        lambda: match.contains({"a": value}),
        lambda: match.equals(value),
    ):
        with pytest.raises(ValueError, match="no JSON value"):
            make()


class Colour(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    SMALL = 1


@pytest.mark.parametrize(
    ("expected", "arguments"),
    [
        (Colour.RED, '"red"'),
        (Size.SMALL, "1"),
        (Decimal("500"), "500.0"),
        (Fraction(1, 2), "0.5"),
        ({"c": [Colour.RED]}, '{"c": ["red"]}'),
    ],
)
def test_values_that_stand_for_json_ones_match_them(expected: Any, arguments: str) -> None:
    assert matches(expected, arguments), mismatch(expected, decode_arguments(arguments))
    assert not matches(expected, "true")


@given(st.lists(st.integers(0, 999), min_size=2, max_size=4))
def test_fuzzy_tells_a_list_of_numbers_from_one_number(parts: list[int]) -> None:
    """Spaces and separators are ignored, not the edges between numbers: "3, 4" is
    not 34, and "1,5" is not 15 (a thousands separator groups three digits)."""
    listed = ", ".join(map(str, parts))
    joined = "".join(map(str, parts))
    assert match.fuzzy(joined).mismatch(listed, "x") is not None
    assert match.fuzzy(joined).mismatch(",".join(map(str, parts)), "x") is not None or all(
        len(str(p)) == 3 for p in parts[1:]
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("181,001", 181001),
        ("181 001", "181001"),
        ("1.5e3", 1500),
        ("1,000.50", "1000.5"),
        (181001.0, "181,001"),
        ("0.50", 0.5),
        ("1_000_000", 10**6),
        ("Paris ", "PARIS"),
    ],
)
def test_fuzzy_examples_that_are_one_value(a: Any, b: Any) -> None:
    assert match.fuzzy(a).mismatch(b, "x") is None
    assert match.fuzzy(b).mismatch(a, "x") is None


@pytest.mark.parametrize(
    ("a", "b"), [("3, 4", "34"), ("1,5", "15"), ("1,0000", "10000"), ("02139", "2139")]
)
def test_fuzzy_examples_that_are_not(a: Any, b: Any) -> None:
    assert match.fuzzy(a).mismatch(b, "x") is not None


#: Matchers as a case file or a verdict's JSON can write them.
MATCHERS: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.builds(
            match.approx,
            st.floats(-1e6, 1e6, allow_nan=False),
            st.sampled_from([1e-6, 0.01, 0.5]),
            st.sampled_from([0.0, 1.0]),
        ),
        st.builds(match.fuzzy, st.text(max_size=8) | st.integers(0, 10**6)),
        st.builds(match.regex, st.sampled_from(["^o-", r"\d+", "x$"])),
        st.just(match.anything()),
        st.integers(-5, 5),
        st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.builds(match.contains, inner),
        st.builds(lambda vs: match.one_of(*vs), st.lists(inner, min_size=1, max_size=3)),
        st.builds(
            match.equals, st.dictionaries(st.sampled_from(["regex", "id"]), inner, max_size=2)
        ),
        st.lists(inner, max_size=3),
    ),
    max_leaves=6,
)


@given(MATCHERS)
def test_what_a_verdicts_json_asserts_a_case_file_asserts(expected: Any) -> None:
    """to_json writes an expectation as a case file's tables; read back by the case
    file's rules it is the same expectation (a consumer can copy args_asserted)."""

    def fail(key: str, message: str) -> ValueError:
        return ValueError(f"{key}: {message}")

    back = cases_expectation(to_json(expected), "args.x", fail)
    assert to_json(back) == to_json(expected)
    assert describe(back) == describe(expected)
