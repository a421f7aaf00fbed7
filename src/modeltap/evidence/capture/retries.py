"""Retries: which turns send again a request that had just failed (pure).

SDKs retry a failed call on their own (the openai and anthropic SDKs twice by
default, after 0.5 to 8 s, or after the ``retry-after`` the upstream asked for,
up to 60 s), and agents retry too. Each attempt is a real request with its own
audit record, and stays one; this module says which of them repeat an earlier
one, so that a retried call reads as one call made several times, not as
unrelated turns. ``modeltap report``, ``modeltap view`` and the
:class:`~modeltap.evidence.capture.Capture` API read the same answer from here.

The rule: turn *B* is a **retry** of turn *A* when

1. *A* comes before *B* in the same session and run, and is the **latest**
   earlier turn that sent the **same request**: the same transport, API,
   route and path, and the same body (``body_sha256``: the very bytes sent
   again);
2. *A* **failed** (:func:`attempt_failed`): the upstream never answered (no
   response event, or one without a status and without a first byte), an
   ``error`` event names it (unreachable, reset, timed out, the client gone),
   the upstream refused it (HTTP status 400 or above) or its response was
   cut (not seen completely);
3. *B* was sent **after *A* ended** and **no later than**
   :data:`RETRY_WINDOW_MS` after (*A* ends at its response event, else at its
   last error event, else at its audit record). A turn whose times cannot be
   read is not called a retry: it cannot be shown to follow the pattern.

A retry of a retry points at the attempt it repeats, so attempts chain: the
first attempt is attempt 1, its retry attempt 2, and so on. The same request
sent again after a success is not a retry (rule 1 finds the success, rule 2
fails). Refused requests have no audit record, so they are never attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from modeltap.evidence.capture.turns import Turn, ms_between
from modeltap.evidence.records import AuditRecord

__all__ = ["RETRY_WINDOW_MS", "Attempt", "attempt_failed", "find_retries", "same_request"]

#: How long after a failed attempt ended its retry may start: the longest wait
#: the openai and anthropic SDKs accept from a ``retry-after`` header (60 s),
#: above their own backoff (at most 8 s).
RETRY_WINDOW_MS: Final = 60_000.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """Where a turn stands among the attempts of one call.

    Attributes:
        retry_of: the index of the attempt this turn repeats, or ``None``
            when it is a first attempt.
        attempt: 1 for a first attempt, 2 for its first retry, ...
        first_attempt: the index of the call's first attempt (the turn's own
            index when it is one).
    """

    retry_of: int | None
    attempt: int
    first_attempt: int


def same_request(a: AuditRecord, b: AuditRecord) -> bool:
    """Whether two audit records describe the same request sent twice.

    Args:
        a: the earlier record.
        b: the later one.

    Returns:
        True when run, session, transport, API, route, path and body hash
        are all equal.
    """
    return (
        a.body_sha256 == b.body_sha256
        and a.run_id == b.run_id
        and a.session_id == b.session_id
        and a.transport == b.transport
        and a.api == b.api
        and a.route == b.route
        and a.path == b.path
    )


def attempt_failed(turn: Turn) -> bool:
    """Whether a turn's attempt failed, as a client that retries sees it.

    Args:
        turn: a turn of a capture.

    Returns:
        True when the upstream never answered, an error event names the
        turn, the upstream answered HTTP 400 or above, or the response was
        not seen completely (cut).
    """
    response = turn.response
    if response is None or turn.error_events:
        return True
    if response.status is None and response.ttfb_ms is None:
        return True
    if response.status is not None and response.status >= 400:
        return True
    return not response.evidence_complete


def _ended(turn: Turn) -> str:
    """The ``ts`` at which an attempt ended (response, else last error, else its record)."""
    if turn.response is not None:
        return turn.response.ts
    if turn.error_events:
        return turn.error_events[-1].ts
    return turn.record.ts


def _follows(earlier: Turn, later: Turn) -> bool:
    """Whether ``later`` was sent after ``earlier`` ended, within the retry window."""
    gap = ms_between(_ended(earlier), later.record.ts)
    return gap is not None and 0 <= gap <= RETRY_WINDOW_MS


def find_retries(turns: Sequence[Turn]) -> dict[int, Attempt]:
    """Place every turn of one session among the attempts of its call.

    Args:
        turns: the session's turns, in order (indexes as the session gives them).

    Returns:
        By turn index, its :class:`Attempt` (first attempts included).
    """
    out: dict[int, Attempt] = {}
    latest: dict[tuple[str, str, str, str | None, str], Turn] = {}
    for turn in turns:
        record = turn.record
        key = (record.body_sha256, record.transport, record.api, record.route, record.path)
        earlier = latest.get(key)
        latest[key] = turn
        if (
            earlier is not None
            and same_request(earlier.record, record)
            and attempt_failed(earlier)
            and _follows(earlier, turn)
        ):
            before = out[earlier.index]
            out[turn.index] = Attempt(earlier.index, before.attempt + 1, before.first_attempt)
        else:
            out[turn.index] = Attempt(None, 1, turn.index)
    return out
