"""Tests for modeltap.evidence.cost: estimates from the genai-prices table, offline.

Expected prices are worked out by hand from the table's per-million-token
prices (shown beside each case), so a test fails if the table or the counting
changes what a response costs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from modeltap.apis.anthropic_messages import NAME as API_ANTHROPIC
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.apis.openai_responses import NAME as API_RESPONSES
from modeltap.evidence.cost import SOURCE, estimate_cost, request_time
from modeltap.evidence.records import Usage

#: The price table the expected prices here were read from.
TABLE = "genai-prices 0.2.3"
AT = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
LOCAL = "http://127.0.0.1:9000"


def estimate(**fields: Any) -> Any:
    values: dict[str, Any] = {
        "api": API_CHAT,
        "provider": "openai",
        "upstream": LOCAL,
        "model": "gpt-5",
        "usage": Usage(),
        "service_tier": None,
        "at": AT,
    }
    return estimate_cost(**(values | fields))


def test_source_names_the_table_and_its_version() -> None:
    """As docs/EVIDENCE.md's cost example says (``"source": "genai-prices 0.2.3"``): the
    table this file's expected prices were worked out from by hand."""
    assert SOURCE == TABLE, (
        f"priced by {SOURCE}: check the hand-worked prices here against its table, then "
        "set TABLE and docs/EVIDENCE.md's cost example"
    )


def test_anthropic_prices_cache_reads_and_writes_at_their_rates() -> None:
    # claude-sonnet-4-5: $3 input, $0.30 cache read, $3.75 cache write, $15 output per Mtok.
    # Anthropic's input_tokens (25) leaves the cache out: 25 + 10 read + 5 written.
    cost = estimate(
        api=API_ANTHROPIC,
        provider="anthropic",
        model="claude-sonnet-4-5-20250929",
        usage=Usage(input_tokens=25, output_tokens=7, cache_read_tokens=10, cache_write_tokens=5),
    )
    assert cost.estimate_usd == pytest.approx((25 * 3 + 10 * 0.3 + 5 * 3.75 + 7 * 15) / 1e6)
    assert cost.priced_as == "anthropic/claude-sonnet-4-5"
    assert (cost.source, cost.note) == (SOURCE, None)


def test_openai_cached_input_is_part_of_the_input() -> None:
    # gpt-5: $1.25 input, $0.125 cached input, $10 output per Mtok; 3 of 21 cached.
    cost = estimate(usage=Usage(21, 5, 26, cache_read_tokens=3, reasoning_tokens=2))
    assert cost.estimate_usd == pytest.approx((18 * 1.25 + 3 * 0.125 + 5 * 10) / 1e6)
    responses = estimate(api=API_RESPONSES, usage=Usage(30, 6, 36, 4, None, 2))
    assert responses.estimate_usd == pytest.approx((26 * 1.25 + 4 * 0.125 + 6 * 10) / 1e6)


def test_the_tier_that_served_selects_the_price() -> None:
    standard = estimate(usage=Usage(1000, 100, 1100, cache_read_tokens=0))
    flex = estimate(usage=Usage(1000, 100, 1100, cache_read_tokens=0), service_tier="flex")
    assert flex.estimate_usd == pytest.approx(standard.estimate_usd / 2)


def test_the_upstream_address_names_the_provider() -> None:
    """A chat wire to OpenRouter is priced at OpenRouter's table, not OpenAI's."""
    cost = estimate(
        upstream="https://openrouter.ai/api/v1",
        model="openai/gpt-5",
        usage=Usage(1000, 100, 1100, cache_read_tokens=0),
    )
    assert cost.priced_as is not None and cost.priced_as.startswith("openrouter/")
    assert cost.estimate_usd is not None and cost.estimate_usd > 0


@pytest.mark.parametrize(
    ("fields", "note"),
    [
        ({"model": "stand-in-model"}, "model not in the price table"),
        ({"model": None}, "no model to price"),
        ({"usage": Usage(output_tokens=5)}, "input or output tokens not reported"),
        ({"usage": Usage(input_tokens=5)}, "input or output tokens not reported"),
        # gpt-5 prices cached input apart: without the cached count, no estimate.
        (
            {"usage": Usage(9, 2, 11)},
            "cache read tokens not reported; the table prices them apart",
        ),
        # More cached than input: counts the table cannot price.
        (
            {"usage": Usage(10, 2, 12, cache_read_tokens=50)},
            "the price table could not price these counts",
        ),
    ],
)
def test_unknown_is_none_never_zero(fields: dict[str, Any], note: str) -> None:
    cost = estimate(**fields)
    assert cost.estimate_usd is None
    assert cost.note == note
    assert cost.source == SOURCE


def test_a_known_zero_costs_zero() -> None:
    cost = estimate(usage=Usage(0, 0, 0, cache_read_tokens=0))
    assert cost.estimate_usd == 0.0 and cost.note is None


def test_prices_in_force_when_the_request_was_made() -> None:
    """The flex tier of gpt-5 has its price from 2026-10-12 in the table."""
    usage = Usage(1000, 100, 1100, cache_read_tokens=0)
    before = estimate(usage=usage, service_tier="flex", at=datetime(2026, 9, 1, tzinfo=UTC))
    after = estimate(usage=usage, service_tier="flex", at=AT)
    assert before.estimate_usd != after.estimate_usd


def test_request_time() -> None:
    assert request_time("2026-11-01T10:00:00.000Z") == AT
    assert request_time("garbage").tzinfo is not None


def test_new_model_names_do_not_grow_the_tables_memos() -> None:
    from modeltap.evidence import cost

    for index in range(3 * cost._MAX_MEMOS):
        estimate(model=f"made-up-{index}", usage=Usage(1, 1, 2, cache_read_tokens=0))
    memos = ("_lookup_cache", "_provider_cache", "_provider_misses")
    assert sum(len(getattr(cost._snapshot(), name)) for name in memos) <= cost._MAX_MEMOS + 2
