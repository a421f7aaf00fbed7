"""What every API's stream observer shares: the terminal flag and bounded capture errors.

An observer is a sans-I/O object: fed one decoded event at a time, it keeps
facts (ids, usage, finish reasons, tool calls), never the text the model
wrote, and hands back :class:`~modeltap.records.ResponseFacts` when the stream
ends. Its contract is :class:`~modeltap.apis.contract.StreamObserver`.
"""

from __future__ import annotations

import re
from typing import Any

#: Provider error types are identifiers; anything else is not copied into errors.
_ERROR_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

#: A broken stream can repeat the same fault many times; its error list stays short.
MAX_CAPTURE_ERRORS = 16


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

    The terminal flag behind :attr:`done`, and the response's capture errors:
    deduplicated, in order, and bounded by :data:`MAX_CAPTURE_ERRORS` so a long
    broken stream cannot grow them.
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
