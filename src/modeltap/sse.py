"""Incremental Server-Sent Events decoder (sans-I/O): feed bytes, get events."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched SSE event. ``event`` is None when no ``event:`` field was sent."""

    event: str | None
    data: str
    id: str | None = None
