"""Duplicate keys in audited JSON (``json_body.reject_duplicate_keys``).

The reference is the standard library's parser with an ``object_pairs_hook``
that sees every member, repeated ones included: the property tests write JSON
texts with repeated keys, escaped colons and odd spacing, and check that the
counting method agrees with it on every one.
"""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.apis import json_body
from modeltap.rules.errors import Rejected


def has_duplicates(text: bytes) -> bool:
    """The reference: does any object of ``text`` repeat a key?"""
    found = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        keys = [k for k, _ in pairs]
        found = found or len(set(keys)) != len(keys)
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return found


def detects(text: bytes) -> bool:
    try:
        json_body.reject_duplicate_keys(text, orjson.loads(text))
    except Rejected as e:
        assert e.rule == "duplicate_key"
        return True
    return False


@pytest.mark.parametrize(
    "text",
    [
        b'{"model":"a","model":"b"}',
        b'{"model": "a" , "model" : "a"}',
        b'{"model":"a","mod\\u0065l":"b"}',
        b'{"a":[{"b":1},{"c":{"d":1,"d":2}}]}',
        b'{"k\\u003a":1,"k:":2}',
        b'{"a":"\\u003a","b":{"x":1,"x":1}}',
        b'{"":1,"":2}',
        b'{"a":{"a":1},"a":{"a":1}}',
    ],
)
def test_duplicates_are_found(text: bytes) -> None:
    assert has_duplicates(text)
    assert detects(text)
    with pytest.raises(Rejected):
        json_body.parse_json_object(text)


@pytest.mark.parametrize(
    "text",
    [
        b"{}",
        b'{"a":{"a":{"a":1}}}',
        b'{"a":"x:y:z","b":["c:d",{"e":"f:"}]}',
        b'{"a":"\\u003a","b":"\\u003A\\\\u003a"}',
        b'{"a:":1,"a":2}',
        b'{"a":"\\":\\":"}',
        b'{"a":"\\\\","b":"\\\\\\""}',
        b'{"model":"m","messages":[{"role":"user","content":"{\\"x\\": 1, \\"x\\": 2}"}]}',
    ],
)
def test_no_false_duplicates(text: bytes) -> None:
    assert not has_duplicates(text)
    assert not detects(text)
    json_body.parse_json_object(text)


def test_deeper_than_orjson_writes_is_still_counted() -> None:
    """orjson reads 1024 levels but writes 254: the exact count takes over."""
    deep = b'{"a":' * 400 + b'{"x":1,"x":2}' + b"}" * 400
    clean = b'{"a":' * 400 + b'{"x":1,"y":2}' + b"}" * 400
    assert detects(deep) and not detects(clean)


# ---------------------------------------------------------------- property

KEYS = st.sampled_from(["a", "b", "model", "x:y", ":", "", "é", "\\", '"'])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(alphabet='ab:\\"é', max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(st.tuples(KEYS, inner), max_size=4),  # an object, as pairs: keys may repeat
    ),
    max_leaves=20,
)


def write(value: Any, rng: random.Random) -> str:
    """JSON text for ``value``; pair lists are objects; ':' in strings is sometimes escaped."""
    space = rng.choice(["", " ", "\n\t"])
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        members = [f"{write_str(k, rng)}{space}:{space}{write(v, rng)}" for k, v in value]
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(write(v, rng) for v in value) + "]"
    if isinstance(value, str):
        return write_str(value, rng)
    return json.dumps(value)


def write_str(text: str, rng: random.Random) -> str:
    out = json.dumps(text, ensure_ascii=rng.random() < 0.5)
    return out.replace(":", rng.choice([":", "\\u003a", "\\u003A"]))


@given(
    pairs=st.lists(st.tuples(KEYS, VALUES), max_size=5),
    seed=st.integers(0, 2**16),
)
def test_agrees_with_a_parser_that_sees_every_member(
    pairs: list[tuple[str, Any]], seed: int
) -> None:
    text = write(pairs, random.Random(seed)).encode() if pairs else b"{}"
    assert detects(text) == has_duplicates(text)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b":",
        b'{"a":1,"b":{"c":":"}}',
        b":" * (2 * 1024 * 1024 + 3),
        (b'{"k":"' + b"x:" * 700_000 + b'"}') * 2,
    ],
)
def test_colons_counts_every_colon(data: bytes) -> None:
    """The fast count agrees with bytes.count, across its 1 MiB slices too."""
    assert json_body.colons(data) == data.count(b":")
