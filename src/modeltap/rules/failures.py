"""Timeouts and blame: how long modeltap waits, and whose fault a failure was.

Pure (no mitmproxy): the glue turns what it saw into plain facts and asks
these functions what they mean.

Three things live here:

- :class:`Timeouts`, the limits of ``--upstream-timeout`` (``connect``,
  ``first-byte``, ``idle``) and ``--client-timeout``, parsed by
  :func:`parse_upstream_timeout`.
- :func:`check_deadline`: given the phase an exchange is in and what it has
  seen so far, has a limit passed, and if not, when to look again.
- :func:`classify_failure`: the failure kind written in ``events.jsonl``
  (``upstream_timeout``, ``upstream_unreachable``, ``upstream_reset``,
  ``upstream_protocol_error``, ``bad_request``, ``client_timeout``,
  ``client_gone``), decided from
  :class:`FailureFacts`, never from an error message's wording; and
  :func:`stop_reason_for`, the ``sessions.jsonl`` stop reason it leads to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Final, Literal

#: A phase whose limit can pass. ``request``: the client is sending its body;
#: ``connect``: the upstream connection (TCP and TLS) is being set up;
#: ``first_byte``: the request was forwarded, no response yet; ``idle``: the
#: response started and its next bytes are awaited.
Phase = Literal["request", "connect", "first_byte", "idle"]

#: The failure kinds of ``error`` events, each naming whose fault it was.
FAILURE_KINDS: Final = (
    "upstream_timeout",  # the upstream did not answer (connect, first byte, idle gap)
    "upstream_unreachable",  # no connection to the upstream could be made
    "upstream_reset",  # the upstream closed or broke the connection mid-exchange
    "upstream_protocol_error",  # the upstream's answer broke HTTP framing
    "bad_request",  # the client broke HTTP (framing, smuggling attempts): refused
    "client_timeout",  # the client stopped sending its request body
    "client_gone",  # the client closed the connection before the exchange ended
    "proxy_stopped",  # modeltap was stopped while the exchange was in flight
)

#: The ``sessions.jsonl`` stop reason each failure kind leads to.
_STOP_REASONS: Final[dict[str, str]] = {
    "upstream_timeout": "upstream_error",
    "upstream_unreachable": "upstream_error",
    "upstream_reset": "upstream_error",
    "upstream_protocol_error": "upstream_error",
    # The client's request never became one modeltap could audit.
    "bad_request": "request_audit_error",
    "client_timeout": "request_audit_error",
    "client_gone": "client_gone",
    "proxy_stopped": "proxy_stopped",
}

#: The status the agent gets when modeltap ends an exchange for a kind, before
#: any response reached it (mitmproxy answers the others itself).
ANSWER_STATUS: Final[dict[str, int]] = {"upstream_timeout": 504}

_KEYS: Final[dict[str, str]] = {"connect": "connect", "first-byte": "first_byte", "idle": "idle"}


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long modeltap waits, in seconds, in each phase of an exchange.

    The upstream defaults sit just under the ten-minute read timeout of the
    OpenAI and Anthropic SDKs: a reasoning model may think for minutes before
    its first byte (or between two stream chunks), and when an upstream truly
    stalls the proxy, not the SDK, should end the wait, so the failure is
    named ``upstream_timeout`` rather than ``client_gone``.
    """

    #: Setting up the upstream connection, TCP and TLS.
    connect: float = 10.0
    #: From forwarding the request to the response's first byte (connect included).
    first_byte: float = 540.0
    #: The longest gap between two pieces of a response once it has started.
    idle: float = 540.0
    #: The longest gap while a client sends its request body (``--client-timeout``).
    request: float = 60.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"the {f.name} timeout must be a positive number of seconds")

    @property
    def longest(self) -> float:
        """The longest limit, so an outer watchdog can be set above all of them."""
        return max(self.connect, self.first_byte, self.idle, self.request)

    @property
    def watchdog(self) -> int:
        """An inactivity timeout for whole connections (mitmproxy's ``tcp_timeout``)
        safely above every limit, so these limits, not the watchdog, end a stalled
        exchange: mitmproxy's 600 s default when that is enough."""
        return max(600, math.ceil(self.longest) + 60)

    def upstream_spec(self) -> str:
        """The upstream limits in ``--upstream-timeout`` syntax."""
        return f"connect={self.connect:g},first-byte={self.first_byte:g},idle={self.idle:g}"

    def earliest(self, phase: Literal["request", "waiting", "response"]) -> float:
        """The soonest a limit can pass after entering ``phase`` (progress only
        pushes it later), as :func:`check_deadline` names the phases."""
        if phase == "request":
            return self.request
        if phase == "waiting":
            return min(self.connect, self.first_byte)
        return self.idle

    def describe_upstream(self) -> str:
        """The upstream limits as the start-up screen shows them."""
        return (
            f"connect {_seconds(self.connect)}, first byte {_seconds(self.first_byte)}, "
            f"idle {_seconds(self.idle)}"
        )


#: ``--upstream-timeout`` as the defaults spell it.
DEFAULT_UPSTREAM_TIMEOUT: Final = Timeouts().upstream_spec()


def parse_upstream_timeout(spec: str, base: Timeouts | None = None) -> Timeouts:
    """Parse ``--upstream-timeout``: ``connect=10,first-byte=540,idle=540``.

    Keys may be given in any order and any subset; the others keep their value
    in ``base`` (the defaults). A bare number sets all three. Values are
    seconds (decimals allowed), optionally suffixed ``s`` or ``m``.

    Args:
        spec: the option's value.
        base: the limits to start from (default :class:`Timeouts`).

    Returns:
        The limits.

    Raises:
        ValueError: with a message naming the accepted syntax (never echoing
            more of the value than its key).
    """
    base = base or Timeouts()
    spec = spec.strip()
    if not spec:
        raise ValueError(_SYNTAX)
    if "=" not in spec:
        seconds = parse_seconds(spec, "upstream")
        return replace(base, connect=seconds, first_byte=seconds, idle=seconds)
    changes: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        name = _KEYS.get(key.strip().lower())
        if not sep or name is None:
            raise ValueError(_SYNTAX)
        if name in changes:
            raise ValueError(f"--upstream-timeout names {key.strip()} twice")
        changes[name] = parse_seconds(value, key.strip())
    return replace(base, **changes)


_SYNTAX = (
    "--upstream-timeout takes connect=SECONDS,first-byte=SECONDS,idle=SECONDS "
    "(any subset, e.g. first-byte=900), or one number for all three"
)


def parse_seconds(value: str, what: str) -> float:
    """Parse a positive duration such as ``60``, ``1.5``, ``90s`` or ``10m``.

    Raises:
        ValueError: naming ``what`` if the value is not a positive finite duration.
    """
    text = value.strip().lower()
    scale = 1.0
    if text.endswith("m"):
        text, scale = text[:-1], 60.0
    elif text.endswith("s"):
        text = text[:-1]
    try:
        seconds = float(text) * scale
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"the {what} timeout must be a positive number of seconds")
    return seconds


def _seconds(value: float) -> str:
    return f"{value:g} s"


# --------------------------------------------------------------------------- deadlines


@dataclass(frozen=True, slots=True)
class Expired:
    """A limit passed: the exchange must end, blamed on ``phase``."""

    phase: Phase


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """No limit passed yet; look again at ``when`` (same clock as the inputs)."""

    when: float


def check_deadline(
    timeouts: Timeouts,
    phase: Literal["request", "waiting", "response"],
    *,
    now: float,
    since: float,
    last_progress: float,
    connected: bool,
) -> Expired | WaitUntil:
    """Decide whether an exchange has overrun a limit.

    Args:
        timeouts: the limits.
        phase: ``request`` (the client is sending the body), ``waiting`` (the
            request was forwarded; no response yet) or ``response`` (the
            response started).
        now: the current time, in seconds.
        since: when the phase began (for ``waiting``: when the request was forwarded).
        last_progress: when bytes last arrived from the side being waited on
            (at least ``since``).
        connected: ``waiting`` only: whether the upstream connection is set up.

    Returns:
        :class:`Expired` with the phase to blame, or :class:`WaitUntil` with
        the earliest time a limit could pass (progress may push it later).
    """
    if phase == "request":
        return _idle(timeouts.request, "request", now, max(since, last_progress))
    if phase == "response":
        return _idle(timeouts.idle, "idle", now, max(since, last_progress))
    first_byte_at = since + timeouts.first_byte
    if connected:
        return Expired("first_byte") if now >= first_byte_at else WaitUntil(first_byte_at)
    connect_at = since + timeouts.connect
    if now >= min(connect_at, first_byte_at):
        return Expired("connect")
    return WaitUntil(min(connect_at, first_byte_at))


def _idle(limit: float, phase: Phase, now: float, last: float) -> Expired | WaitUntil:
    return Expired(phase) if now >= last + limit else WaitUntil(last + limit)


# --------------------------------------------------------------------------- blame


@dataclass(frozen=True, slots=True)
class FailureFacts:
    """What the proxy knows about an exchange that ended in an error.

    Each field is a fact read from modeltap's own state or from the flow and
    its connections, not from an error message.
    """

    #: The phase whose limit modeltap enforced, if one of its own timers ended it.
    timed_out: Phase | None = None
    #: The client's request broke HTTP (invalid framing headers, bad chunked
    #: body, headers refused as a smuggling attempt).
    client_broke_http: bool = False
    #: The upstream's response broke HTTP (invalid framing headers or body).
    upstream_broke_http: bool = False
    #: The client had closed its connection when the failure was reported.
    client_closed: bool = False
    #: An upstream connection was set up for this request.
    upstream_connected: bool = False


def classify_failure(facts: FailureFacts) -> str:
    """Name a failure for whose fault it was.

    Order matters: modeltap's own timeouts are certain; a request that broke
    HTTP is the client's fault whatever happened next, a response that broke
    it the upstream's; a client that closed its connection before the
    upstream failed left first; otherwise the upstream failed, before or
    after a connection was made.

    Args:
        facts: what the proxy saw.

    Returns:
        One of :data:`FAILURE_KINDS`.
    """
    if facts.timed_out == "request":
        return "client_timeout"
    if facts.timed_out is not None:
        return "upstream_timeout"
    if facts.client_broke_http:
        return "bad_request"
    if facts.upstream_broke_http:
        return "upstream_protocol_error"
    if facts.client_closed:
        return "client_gone"
    if not facts.upstream_connected:
        return "upstream_unreachable"
    return "upstream_reset"


def stop_reason_for(kind: str) -> str:
    """The ``sessions.jsonl`` stop reason a failure kind leads to.

    Raises:
        KeyError: for a kind not in :data:`FAILURE_KINDS` (a programming error).
    """
    return _STOP_REASONS[kind]


#: Fixed descriptions of each failure kind and timed-out phase, for capture
#: errors and the agent's error body (never a message from mitmproxy or the
#: upstream, which may quote request or response bytes).
PHASE_TEXT: Final[dict[str, str]] = {
    "request": "the client sent no request bytes for --client-timeout",
    "connect": "the upstream connection was not set up within --upstream-timeout connect",
    "first_byte": "the upstream sent no response within --upstream-timeout first-byte",
    "idle": "the upstream sent nothing for --upstream-timeout idle",
}

#: What a failure kind is called on the console's line, in a few words.
_FAILURE_WORDS: Final[dict[str, str]] = {
    "upstream_unreachable": "upstream unreachable",
    "upstream_protocol_error": "upstream broke HTTP",
    "bad_request": "bad request (HTTP framing)",
    "client_timeout": "timeout: client body",
    "client_gone": "client gone",
    "proxy_stopped": "proxy stopped",
}

_PHASE_WORDS: Final[dict[str, str]] = {
    "request": "client body",
    "connect": "connect",
    "first_byte": "first byte",
    "idle": "idle",
}


def describe_failure(kind: str, expired: Phase | None = None, *, answered: bool = False) -> str:
    """A failure in a few words, for the console's line of the exchange.

    Args:
        kind: one of :data:`FAILURE_KINDS`.
        expired: the phase whose limit ended it, for a timeout.
        answered: the upstream's answer had started (a status, or a first
            WebSocket event): a reset then cut the stream.

    Returns:
        ``upstream unreachable``, ``stream cut``, ``timeout: first byte``,
        ``client gone``...; the kind itself for one it does not know.
    """
    if kind == "upstream_timeout":
        return "timeout: " + _PHASE_WORDS.get(expired or "", "upstream")
    if kind == "upstream_reset":
        return "stream cut" if answered else "upstream closed the connection"
    return _FAILURE_WORDS.get(kind, kind.replace("_", " "))
