"""Timeouts and blame (modeltap.rules.failures), alone: parsing, deadlines, classification."""

from __future__ import annotations

from typing import Literal

import pytest

from modeltap.evidence.records import STOP_REASONS
from modeltap.rules.failures import (
    FAILURE_KINDS,
    Expired,
    FailureFacts,
    Timeouts,
    WaitUntil,
    check_deadline,
    classify_failure,
    parse_seconds,
    parse_upstream_timeout,
    stop_reason_for,
)


def test_defaults_suit_long_reasoning_but_stay_under_the_sdks_read_timeout() -> None:
    t = Timeouts()
    # The OpenAI and Anthropic SDKs read with a 600 s timeout: modeltap must end
    # a stalled wait first, or the blame lands on the client.
    assert 300 <= t.first_byte < 600 and 300 <= t.idle < 600
    assert t.connect <= 30
    assert t.describe_upstream() == "connect 10 s, first byte 540 s, idle 540 s"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("connect=5,first-byte=900,idle=120", (5, 900, 120)),
        ("first-byte=2", (10, 2, 540)),
        (" IDLE = 1.5 ", (10, 540, 1.5)),
        ("idle=2m", (10, 540, 120)),
        ("connect=3s", (3, 540, 540)),
        ("30", (30, 30, 30)),
    ],
)
def test_parse_upstream_timeout(spec: str, expected: tuple[float, float, float]) -> None:
    t = parse_upstream_timeout(spec)
    assert (t.connect, t.first_byte, t.idle) == expected
    assert t.request == Timeouts().request  # not part of this option


@pytest.mark.parametrize(
    "spec",
    ["", "connect", "connect=", "read=5", "connect=0", "idle=-1", "idle=nan", "idle=inf",
     "first-byte=5,first-byte=6", "connect=5;idle=4", "connect=abc", "0"],
)  # fmt: skip
def test_parse_upstream_timeout_refuses(spec: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_upstream_timeout(spec)
    assert "timeout" in str(exc.value)


def test_parse_keeps_the_base() -> None:
    base = Timeouts(connect=1, first_byte=2, idle=3, request=4)
    assert parse_upstream_timeout("idle=9", base) == Timeouts(1, 2, 9, 4)


def test_parse_seconds_and_timeouts_validate() -> None:
    assert parse_seconds("60", "client") == 60.0
    with pytest.raises(ValueError, match="client"):
        parse_seconds("-3", "client")
    with pytest.raises(ValueError):
        Timeouts(request=0)
    assert Timeouts(connect=1, first_byte=700, idle=2, request=3).longest == 700


T = Timeouts(connect=10, first_byte=100, idle=50, request=20)


def test_request_phase_is_an_idle_gap() -> None:
    assert check_deadline(T, "request", now=119, since=0, last_progress=100, connected=False) == (
        WaitUntil(120)
    )
    assert check_deadline(T, "request", now=120, since=0, last_progress=100, connected=False) == (
        Expired("request")
    )


def test_waiting_phase_connect_then_first_byte() -> None:
    # Not connected: the connect limit comes first.
    assert check_deadline(T, "waiting", now=5, since=0, last_progress=0, connected=False) == (
        WaitUntil(10)
    )
    assert check_deadline(T, "waiting", now=10, since=0, last_progress=0, connected=False) == (
        Expired("connect")
    )
    # Connected: only the first-byte limit, counted from forwarding.
    assert check_deadline(T, "waiting", now=10, since=0, last_progress=0, connected=True) == (
        WaitUntil(100)
    )
    assert check_deadline(T, "waiting", now=100, since=0, last_progress=99, connected=True) == (
        Expired("first_byte")
    )


def test_first_byte_shorter_than_connect_still_ends_the_wait() -> None:
    t = Timeouts(connect=30, first_byte=2, idle=50, request=20)
    assert check_deadline(t, "waiting", now=1, since=0, last_progress=0, connected=False) == (
        WaitUntil(2)
    )
    assert check_deadline(t, "waiting", now=2, since=0, last_progress=0, connected=False) == (
        Expired("connect")
    )


def test_response_phase_progress_pushes_the_deadline() -> None:
    assert check_deadline(T, "response", now=60, since=0, last_progress=30, connected=True) == (
        WaitUntil(80)
    )
    assert check_deadline(T, "response", now=80, since=0, last_progress=30, connected=True) == (
        Expired("idle")
    )
    # Progress before the phase began does not count against it.
    assert check_deadline(T, "response", now=60, since=20, last_progress=5, connected=True) == (
        WaitUntil(70)
    )


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        (FailureFacts(timed_out="first_byte", client_closed=True), "upstream_timeout"),
        (FailureFacts(timed_out="connect"), "upstream_timeout"),
        (FailureFacts(timed_out="idle", upstream_connected=True), "upstream_timeout"),
        (FailureFacts(timed_out="request", client_closed=True), "client_timeout"),
        (FailureFacts(client_broke_http=True, client_closed=True), "bad_request"),
        (FailureFacts(client_broke_http=True), "bad_request"),
        (
            FailureFacts(upstream_broke_http=True, upstream_connected=True),
            "upstream_protocol_error",
        ),
        (FailureFacts(client_broke_http=True, upstream_broke_http=True), "bad_request"),
        (FailureFacts(client_closed=True), "client_gone"),
        (FailureFacts(client_closed=True, upstream_connected=True), "client_gone"),
        (FailureFacts(), "upstream_unreachable"),
        (FailureFacts(upstream_connected=True), "upstream_reset"),
    ],
)
def test_classify_failure(facts: FailureFacts, kind: str) -> None:
    assert classify_failure(facts) == kind


def test_every_kind_has_a_stop_reason_and_timeouts_are_the_upstreams_fault() -> None:
    for kind in FAILURE_KINDS:
        assert stop_reason_for(kind) in STOP_REASONS
    assert stop_reason_for("upstream_timeout") == "upstream_error"
    assert stop_reason_for("client_gone") == "client_gone"
    with pytest.raises(KeyError):
        stop_reason_for("made_up")


def test_spec_round_trips_and_the_watchdog_stays_above_every_limit() -> None:
    from modeltap.rules.failures import DEFAULT_UPSTREAM_TIMEOUT

    assert DEFAULT_UPSTREAM_TIMEOUT == "connect=10,first-byte=540,idle=540"
    assert parse_upstream_timeout(DEFAULT_UPSTREAM_TIMEOUT) == Timeouts()
    assert Timeouts().watchdog == 600  # mitmproxy's own default suffices
    long = parse_upstream_timeout("first-byte=1800")
    assert long.watchdog > long.longest
    assert Timeouts(request=0.5, connect=0.5, first_byte=0.5, idle=0.5).watchdog == 600


PHASES: tuple[Literal["request", "waiting", "response"], ...] = ("request", "waiting", "response")


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("connected", [False, True])
def test_earliest_is_never_later_than_check_deadline(
    phase: Literal["request", "waiting", "response"], connected: bool
) -> None:
    """Deadlines sets its timer at ``earliest``: no limit may pass before it."""
    for t in (T, Timeouts(connect=30, first_byte=2, idle=50, request=20)):
        first = t.earliest(phase)
        verdict = check_deadline(
            t, phase, now=first - 1e-3, since=0, last_progress=0, connected=connected
        )
        assert isinstance(verdict, WaitUntil) and verdict.when >= first
