"""Cost estimates: what an exchange costs by a maintained price table (pure).

SPEC section 5: an estimated price per exchange from a price table library,
not a hand-kept dict; unknown model or unknown counts give ``None``, never 0;
always labelled an estimate (:class:`~modeltap.evidence.records.Cost` carries its
source). Sessions and captures sum them (:func:`modeltap.evidence.capture.sum_costs`).

The table is ``genai-prices`` (Pydantic's, the table Logfire and pydantic-ai
price with): per-provider, per-model prices with their history (a request is
priced at the prices in force when it was made), cached input read and
written at their own rates, long-context tiers, and service-tier variants
(``flex``, ``priority``) selected by the tier that served the response. It is
used offline: only the snapshot bundled with the installed version, never its
auto-update, so pricing needs no network and the same capture prices the same
with the same version.

How a response is priced:

- counts as the GenAI conventions count them (the API module's
  ``usage_totals``: every input token, cached ones included);
- the provider: the one whose API address the upstream is (``api.anthropic.com``,
  ``openrouter.ai``, an Azure host ...) when the table knows it, else the
  exchange's ``gen_ai.provider.name``;
- the model the response names (what ran), else the one requested;
- no estimate (``estimate_usd`` ``None``, with a ``note``) when the model is
  not in the table, input or output tokens were not reported, or the table
  prices cache reads, cache writes or reasoning tokens apart and the provider
  did not report that count. Hosted-tool fees (web searches) are not counted:
  the responses do not report them.
"""

from __future__ import annotations

import functools
import threading
from datetime import UTC, datetime
from importlib.metadata import version
from typing import TYPE_CHECKING, Final

from modeltap import apis
from modeltap.evidence.records import Cost, ResponseFacts, Usage

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, Provider

__all__ = ["PROVIDER_IDS", "SOURCE", "estimate_cost", "load_table", "response_cost"]

#: What every estimate says it comes from.
SOURCE: Final = f"genai-prices {version('genai-prices')}"

#: ``gen_ai.provider.name`` values and the price table's provider ids.
PROVIDER_IDS: Final = {
    "openai": "openai",
    "anthropic": "anthropic",
    "aws.bedrock": "aws",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "deepseek": "deepseek",
    "groq": "groq",
    "mistral_ai": "mistral",
    "x_ai": "x-ai",
    "perplexity": "perplexity",
    "cohere": "cohere",
    "moonshot_ai": "moonshotai",
}

#: Counts the table may price apart from plain input/output, by price key.
_PRICED_APART: Final = (
    ("cache_read_mtok", "cache_read_tokens", "cache read tokens"),
    ("cache_write_mtok", "cache_write_tokens", "cache write tokens"),
    ("output_reasoning_mtok", "reasoning_tokens", "reasoning tokens"),
)

#: The table memoises every lookup, misses included, keyed by model name: a
#: client sending ever new model names would grow it without end. Past this
#: many entries the memos are dropped (they rebuild in microseconds).
_MAX_MEMOS = 4096
_LOADING = threading.Lock()


@functools.cache
def _snapshot() -> DataSnapshot:
    """The bundled table, loaded on first use: importing and reading it takes a
    quarter of a second, which start-up need not wait for (see :func:`load_table`)."""
    with _LOADING:
        from genai_prices.data_snapshot import get_snapshot

        return get_snapshot()


def load_table() -> None:
    """Load the price table now. The proxy calls it on a worker thread once it
    listens, so that neither start-up nor the first response waits for it."""
    _snapshot()


def _bound_memos() -> None:
    memos = [
        getattr(_snapshot(), name, None)
        for name in ("_lookup_cache", "_provider_cache", "_provider_misses")
    ]
    if sum(len(memo) for memo in memos if memo is not None) > _MAX_MEMOS:
        for memo in memos:
            if memo is not None:
                memo.clear()


@functools.lru_cache(maxsize=_MAX_MEMOS)
def _find(model: str, provider: str | None, upstream: str) -> tuple[Provider, ModelInfo] | None:
    """The table's provider and model: by the upstream's address first, then by name.

    Memoised here, misses included: the table memoises a model it found but
    not one it did not, and a miss walks every model's match rules (~55 µs,
    a few percent of an exchange's CPU for a model the table does not know,
    such as a local one). Bounded like the table's own memos.
    """
    _bound_memos()
    attempts: list[tuple[str | None, str | None]] = [(None, upstream)]
    provider_id = PROVIDER_IDS.get(provider or "")
    if provider_id is not None:
        attempts.append((provider_id, None))
    for provider_id, api_url in attempts:
        try:
            return _snapshot().find_provider_model(model, None, provider_id, api_url)
        except LookupError:
            continue
    return None


def _unknown(note: str, priced_as: str | None = None) -> Cost:
    return Cost(estimate_usd=None, source=SOURCE, priced_as=priced_as, note=note)


def estimate_cost(
    *,
    api: str,
    provider: str | None,
    upstream: str,
    model: str | None,
    usage: Usage,
    service_tier: str | None,
    at: datetime,
) -> Cost:
    """Estimate what one exchange cost. Pure: the bundled table, no network. Never raises.

    Args:
        api: the record's ``api`` (its module counts the tokens).
        provider: the exchange's ``gen_ai.provider.name``.
        upstream: the upstream URL the request went to.
        model: the model the response names, else the one requested.
        usage: the counts as the provider reported them (``events.jsonl``'s).
        service_tier: the tier that served the response, if reported.
        at: when the request was made (prices change over time).

    Returns:
        The estimate, with ``estimate_usd`` ``None`` and a ``note`` when there
        is none (see the module docstring).
    """
    module = apis.find(api)
    totals = module.usage_totals(usage) if module is not None else usage
    if not model:
        return _unknown("no model to price")
    found = _find(model, provider, upstream)
    if found is None:
        return _unknown("model not in the price table")
    table_provider, table_model = found
    priced_as = f"{table_provider.id}/{table_model.id}"
    if totals.input_tokens is None or totals.output_tokens is None:
        return _unknown("input or output tokens not reported", priced_as)
    context = {"service_tier": service_tier} if service_tier else None
    try:
        prices = table_model.get_prices(at, context)
        for price_key, count_name, label in _PRICED_APART:
            if getattr(prices, price_key) is not None and getattr(totals, count_name) is None:
                return _unknown(f"{label} not reported; the table prices them apart", priced_as)
        from genai_prices import Usage as PriceUsage

        counted = PriceUsage(
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            cache_read_tokens=totals.cache_read_tokens,
            cache_write_tokens=totals.cache_write_tokens,
            output_reasoning_tokens=totals.reasoning_tokens,
        )
        price = table_model.calc_price(
            counted, table_provider, genai_request_timestamp=at, price_context=context
        )
    except Exception:  # a table or count it cannot price: no estimate, never an exchange lost
        return _unknown("the price table could not price these counts", priced_as)
    return Cost(estimate_usd=float(price.total_price), source=SOURCE, priced_as=priced_as)


def request_time(ts: str) -> datetime:
    """A record's ``ts`` as the time prices are looked up at (now if unreadable)."""
    try:
        return datetime.fromisoformat(ts)
    except ValueError:
        return datetime.now(UTC)


def response_cost(
    *,
    api: str,
    upstream: str,
    request_model: str | None,
    facts: ResponseFacts,
    provider: str | None = None,
    at: datetime | None = None,
) -> Cost:
    """The estimate of one observed response (what the glue puts in its event).

    Args:
        api: the record's ``api``.
        upstream: the upstream URL.
        request_model: the model the request asked for (used when the
            response names none).
        facts: what the observer read off the response.
        provider: the route's real provider when it names one; default the
            wire's (the API module's ``PROVIDER``).
        at: when the request was made; default now.

    Returns:
        The estimate (see :func:`estimate_cost`). Never raises.
    """
    module = apis.find(api)
    return estimate_cost(
        api=api,
        provider=provider or (module.PROVIDER if module is not None else None),
        upstream=upstream,
        model=facts.model or request_model,
        usage=facts.usage,
        service_tier=facts.service_tier,
        at=at or datetime.now(UTC),
    )
