"""What every API's observers share: the terminal flag, bounded capture errors, the end.

An observer is a sans-I/O object: fed one decoded event at a time, it keeps
facts (ids, usage, finish reasons, tool calls), never the text the model
wrote, and hands back :class:`~modeltap.evidence.records.ResponseFacts` when the stream
ends. Its contract is :class:`~modeltap.apis.contract.StreamObserver`. The
facts every ``observe_json`` gives for a body that is no object, or is the
wire's error body, are here too (:data:`NOT_AN_OBJECT`, :data:`ERROR_BODY`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import orjson

from modeltap.apis.stream_templates import Slots
from modeltap.evidence.records import Json, ResponseFacts

#: Provider error types are identifiers; anything else is not copied into errors.
_ERROR_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

#: A broken stream can repeat the same fault many times; its error list stays short.
MAX_CAPTURE_ERRORS = 16

#: What ``observe_json`` returns for a body that is not a JSON object.
NOT_AN_OBJECT: Final = ResponseFacts(capture_errors=("response body is not a JSON object",))
#: What ``observe_json`` returns for the wire's error body: a whole answer.
ERROR_BODY: Final = ResponseFacts(status="error", evidence_complete=True)


def error_type(error: Any) -> str:
    """An error object's ``type`` if it is a plain identifier, else ``unknown``.

    Only the type is ever copied into capture errors, never the provider's message.
    """
    kind = error.get("type") if isinstance(error, dict) else None
    if isinstance(kind, str) and _ERROR_TYPE.fullmatch(kind):
        return kind
    return "unknown"


class StreamObserverBase:
    """What every API's stream observer shares.

    The terminal flag behind :attr:`done`, the response's capture errors
    (deduplicated, in order, and bounded by :data:`MAX_CAPTURE_ERRORS` so a long
    broken stream cannot grow them), reading one event's JSON
    (:meth:`_json_object`) and the end (:meth:`finish`): a subclass says what
    the stream left out (:meth:`_missing`) and what it showed (:meth:`_facts`).
    """

    def __init__(self) -> None:
        self._done = False
        self._errors: dict[str, None] = {}

    @property
    def done(self) -> bool:
        """True once the stream's terminal event was seen."""
        return self._done

    def _note(self, error: str, *, always: bool = False) -> None:
        """Add a capture error; ``always`` keeps it past the bound (the final reason)."""
        if always or len(self._errors) < MAX_CAPTURE_ERRORS:
            self._errors[error] = None

    def _json_object(self, data: str | bytes, what: str) -> Json | None:
        """``data`` parsed as one JSON object, else ``None`` and a capture error.

        Args:
            data: the event's encoded payload.
            what: how the wire calls it, for the error (``"stream chunk"``:
                ``stream chunk is not valid JSON``).
        """
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._note(f"{what} is not valid JSON")
            return None
        if not isinstance(value, dict):
            self._note(f"{what} is not a JSON object")
            return None
        return value

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """Whether an event just fed is *plain*, and where its values may vary.

        A plain event, fed again right after itself with any values in the
        returned slots (non-empty strings in ``text``; values of the same JSON
        type in ``ignored``), changes nothing the observer keeps and returns
        what it returned the first time. The stream tap then counts the events
        whose bytes match it without decoding them
        (:mod:`~modeltap.apis.stream_templates`). ``None`` (the default): decode
        every event.

        Args:
            event: the event's data, parsed (the observer has fed it already).
        """
        return None

    def finish(self, error: str | None = None) -> ResponseFacts:
        """Return what the stream showed.

        What the stream left out comes first among the capture errors, then
        ``error``, which is kept even past the bound.

        Args:
            error: why the stream ended early (reset, client gone), if it did.

        Returns:
            The observed facts; ``evidence_complete`` exactly when no capture
            error was noted.
        """
        for missing in self._missing():
            self._note(missing)
        if error:
            self._note(error, always=True)
        return self._facts()

    def _missing(self) -> Iterator[str]:
        """The capture errors for what the stream left out (its end, a usage chunk)."""
        raise NotImplementedError

    def _facts(self) -> ResponseFacts:
        """The facts observed, capture errors included."""
        raise NotImplementedError
