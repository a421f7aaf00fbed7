"""WebSocket Responses mode (SPEC section 3), sans-I/O.

Client side: :func:`classify_client_message` turns one client frame into a
:class:`Create` (a validated, audited ``response.create``) or a
:class:`Control` (an allow-listed acknowledgement), or raises
:class:`~modeltap.rules.errors.Rejected`; the glue answers a refusal with
:func:`rejection_event` and keeps the connection open.

Server side: :class:`ServerEventObserver` reads the server's events (never
changing them) and hands back, per forwarded ``response.create``, the
:class:`~modeltap.evidence.records.ResponseFacts` of its answer. The glue calls::

    observer.expect(seq, create.facts)       # after forwarding a response.create
    seen = observer.feed(message_bytes)      # for every server message
    if seen.first_output: ...                # time to first token of seen.seq
    if seen.finished: ...                    # write the `response` event of seen.seq
    for done in observer.close(reason): ...  # connection gone: the unanswered ones

A connection answers its ``response.create`` messages in order, so the events
after one forwarded create belong to it until its terminal event
(``response.completed`` / ``incomplete`` / ``failed``, or ``error``).
"""

from __future__ import annotations

import dataclasses
from collections import deque

import orjson

from modeltap.apis.json_body import parse_json_object
from modeltap.apis.openai_responses.audit import (
    audit_request,
    continues_server_state,
    unstated_settings,
)
from modeltap.apis.openai_responses.observe import StreamObserver
from modeltap.apis.websocket_mode import (
    ClientMessage,
    Control,
    Create,
    Finished,
    Observed,
    WsPolicy,
)
from modeltap.evidence.records import Json, RequestFacts
from modeltap.rules.errors import Rejected, Rule


def classify_client_message(data: bytes | str, is_text: bool, policy: WsPolicy) -> ClientMessage:
    """Validate one client frame of a Responses WebSocket.

    Args:
        data: the frame's payload.
        is_text: whether it was a text frame.
        policy: the connection's policy.

    Returns:
        :class:`Create` for a valid ``response.create``, :class:`Control` for
        an allow-listed type.

    Raises:
        Rejected: ``ws_binary_frame``, ``ws_invalid_json``, ``duplicate_key``,
            ``ws_unsupported_type``, ``ws_nested_response``,
            ``messages_and_input``, ``ws_missing_input``,
            ``ws_implicit_continuation``, or any rule of
            :func:`~modeltap.apis.openai_responses.audit_request`.
    """
    if not is_text:
        raise Rejected(Rule.WS_BINARY_FRAME)
    # Every message is checked for duplicate keys, not only response.create:
    # {"type": "response.create", ..., "type": "response.processed"} would pass
    # here as a control message while a first-wins server runs it.
    message = parse_json_object(
        data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"),
        Rule.WS_INVALID_JSON,
        Rule.WS_INVALID_JSON,
    )
    kind = message.get("type")
    if kind == "response.create":
        return Create(facts=_audit_create(message, policy), body=message)
    if isinstance(kind, str) and kind in policy.allow:
        return Control(type=kind)
    raise Rejected(Rule.WS_UNSUPPORTED_TYPE)


def _audit_create(message: Json, policy: WsPolicy) -> RequestFacts:
    """Validate and audit a ``response.create`` whose fields sit at the top level."""
    # Realtime-style clients nest the body under `response`; its settings
    # would be read by the server but not by our audit.
    if "response" in message:
        raise Rejected(Rule.WS_NESTED_RESPONSE)
    body = {key: value for key, value in message.items() if key != "type"}
    if "messages" in body and "input" in body:
        raise Rejected(Rule.MESSAGES_AND_INPUT)
    if "input" not in body:
        raise Rejected(Rule.WS_MISSING_INPUT)
    if (
        policy.continuation == "explicit"
        and continues_server_state(body)
        and (unstated_settings(body) or body.get("model") is None)
    ):
        raise Rejected(Rule.WS_IMPLICIT_CONTINUATION)
    # Under as-sent, audit_request records the unstated settings as omitted.
    facts = audit_request(body)
    return dataclasses.replace(facts, stream=True)


def rejection_event(rejected: Rejected) -> bytes:
    """The error event sent to the client instead of forwarding a refused message.

    Args:
        rejected: the refusal; only its fixed message is used.

    Returns:
        UTF-8 JSON of ``{"type": "error", "error": {"type":
        "invalid_request_error", "code": "modeltap_rejected", "message": ...}}``.
    """
    return orjson.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "code": "modeltap_rejected",
                "message": rejected.message,
            },
        }
    )


class _Expected:
    """One forwarded ``response.create`` awaiting its answer."""

    __slots__ = ("observer", "output_seen", "seq")

    def __init__(self, seq: int, facts: RequestFacts, capture_content: bool) -> None:
        self.seq = seq
        self.observer = StreamObserver(facts, capture_content=capture_content)
        self.output_seen = False


class ServerEventObserver:
    """Route one connection's server events to the responses they answer.

    Holds one :class:`~modeltap.apis.openai_responses.StreamObserver` per
    unanswered ``response.create`` (facts only, never text, unless
    ``capture_content`` asks for the output to be kept for spans), oldest first.

    Args:
        capture_content: keep each response's output for spans (content
            capture is on).
    """

    def __init__(self, *, capture_content: bool = False) -> None:
        self._capture_content = capture_content
        self._expected: deque[_Expected] = deque()

    @property
    def pending(self) -> int:
        """How many forwarded ``response.create`` messages are still unanswered."""
        return len(self._expected)

    def expect(self, seq: int, facts: RequestFacts) -> None:
        """Note that a ``response.create`` was forwarded; events after it answer it.

        Args:
            seq: its audit record's ``seq``.
            facts: its audit facts.
        """
        self._expected.append(_Expected(seq, facts, self._capture_content))

    def feed(self, data: bytes | str) -> Observed:
        """Observe one server message. Never raises.

        Args:
            data: the message payload (a JSON event; anything else is noted as
                a capture error of the response it interrupts).

        Returns:
            What it meant for the oldest unanswered response.
        """
        if not self._expected:
            return Observed(seq=None)
        current = self._expected[0]
        output = current.observer.feed_text(data)
        first_output = output and not current.output_seen
        current.output_seen = current.output_seen or output
        if not current.observer.done:
            return Observed(seq=current.seq, first_output=first_output)
        self._expected.popleft()
        return Observed(
            seq=current.seq, first_output=first_output, finished=current.observer.finish()
        )

    def close(self, reason: str) -> list[Finished]:
        """Finish every unanswered response because the connection ended.

        Args:
            reason: why, e.g. ``"connection closed (1006)"``; a capture error
                of each response, after "stream ended before response.completed".

        Returns:
            Their facts, oldest first (``evidence_complete`` False).
        """
        finished = [
            Finished(seq=expected.seq, facts=expected.observer.finish(reason))
            for expected in self._expected
        ]
        self._expected.clear()
        return finished
