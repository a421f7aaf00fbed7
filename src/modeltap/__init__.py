"""modeltap: a capture proxy beside an AI agent.

It writes a request-audit record for every model request before forwarding
it, refuses what it cannot audit, observes responses and streams, and exports
OpenTelemetry spans. Read the evidence with :class:`modeltap.Capture`, or as
:class:`modeltap.Report` (what ``modeltap report`` prints).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from modeltap.evidence.capture import Capture
    from modeltap.report.types import Report


def __getattr__(name: str) -> Any:
    # Lazy, so `import modeltap` stays cheap and the core stays importable alone.
    if name == "Capture":
        from modeltap.evidence.capture import Capture

        return Capture
    if name == "Report":
        from modeltap.report.types import Report

        return Report
    raise AttributeError(name)


__all__ = ["Capture", "Report", "__version__"]
