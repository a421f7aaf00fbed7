"""A wire's WebSocket mode (SPEC section 3), as the connection core drives it.

A wire that has one (the Responses API: :mod:`modeltap.apis.openai_responses.websocket`)
names it in :attr:`~modeltap.apis.contract.Wire.WEBSOCKET`; a handshake to
an endpoint of a wire without one is refused (``ws_unsupported_endpoint``).
The connection core (:mod:`modeltap.core.ws_connection`) hands each client
frame to :meth:`WebSocketMode.classify_client_message` (a :class:`Create`
to audit and forward, a :class:`Control` to forward, or a refusal it answers
with :meth:`WebSocketMode.rejection_event`), and each server message to the
mode's :class:`ServerEvents`, which says which forwarded create it answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from modeltap.evidence.records import Json, RequestFacts, ResponseFacts
from modeltap.rules.errors import Rejected


@dataclass(frozen=True, slots=True)
class WsPolicy:
    """How client messages are judged: ``--continuation`` and ``--ws-allow``.

    Args:
        continuation: ``"explicit"`` refuses a continuation that does not
            restate its settings; ``"as-sent"`` audits it with the unstated
            settings listed in ``omitted_settings``.
        allow: message types forwarded as control messages (no model input).

    Raises:
        ValueError: for an unknown ``continuation``.
    """

    continuation: Literal["explicit", "as-sent"] = "explicit"
    allow: frozenset[str] = frozenset({"response.processed"})

    def __post_init__(self) -> None:
        # Literal is not enforced at run time, and a typo must not turn into
        # the permissive policy.
        if self.continuation not in ("explicit", "as-sent"):
            raise ValueError("continuation must be 'explicit' or 'as-sent'")


@dataclass(frozen=True, slots=True)
class Create:
    """A validated message carrying model input (the Responses API's ``response.create``).

    Attributes:
        facts: its audit facts (``stream`` is always True on a WebSocket).
        body: the whole parsed message, ``type`` included: what is forwarded
            (after the wire's :meth:`~modeltap.apis.contract.WireApi.set_image_detail`,
            serialise it again).
    """

    facts: RequestFacts
    body: Json


@dataclass(frozen=True, slots=True)
class Control:
    """An allow-listed message carrying no model input, forwarded as is."""

    type: str


ClientMessage = Create | Control


@dataclass(frozen=True, slots=True)
class Observed:
    """What one server message meant.

    Attributes:
        seq: the audit ``seq`` of the response it belongs to, or None when no
            forwarded :class:`Create` was waiting for an answer.
        first_output: it carried that response's first model output.
        finished: the response's final facts when this message ended it.
    """

    seq: int | None
    first_output: bool = False
    finished: ResponseFacts | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """A response ended by the connection closing, with its (incomplete) facts."""

    seq: int
    facts: ResponseFacts


class ServerEvents(Protocol):
    """Route one connection's server messages to the creates they answer (sans-I/O).

    A connection answers its creates in order; the events after one forwarded
    create belong to it until its terminal event.
    """

    @property
    def pending(self) -> int:
        """How many forwarded creates are still unanswered."""
        ...

    def expect(self, seq: int, facts: RequestFacts) -> None:
        """Note that a create was forwarded (its audit ``seq``); events after it answer it."""
        ...

    def feed(self, data: bytes | str) -> Observed:
        """Observe one server message; never raises."""
        ...

    def close(self, reason: str) -> list[Finished]:
        """Finish every unanswered create because the connection ended (``reason``
        is a capture error of each)."""
        ...


class ServerEventsFactory(Protocol):
    """How a mode's :class:`ServerEvents` class is called."""

    def __call__(self, *, capture_content: bool = False) -> ServerEvents: ...


class WebSocketMode(Protocol):
    """A wire's WebSocket mode: what its client and server messages mean."""

    def classify_client_message(
        self, data: bytes | str, is_text: bool, policy: WsPolicy
    ) -> ClientMessage:
        """Validate one client frame.

        Raises:
            Rejected: the frame cannot be forwarded (the rule says why); the
                connection stays open.
        """
        ...

    def rejection_event(self, rejected: Rejected) -> bytes:
        """The message sent to the client instead of a refused frame (its fixed
        message only)."""
        ...

    @property
    def ServerEventObserver(self) -> ServerEventsFactory:
        """The class observing a connection's server messages (facts only,
        unless built with ``capture_content=True``)."""
        ...
