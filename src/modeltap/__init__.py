"""modeltap: a capture proxy beside an AI agent.

It writes a request-audit record for every model request before forwarding
it, refuses what it cannot audit, observes responses and streams, and exports
OpenTelemetry spans. Read the evidence with :class:`modeltap.Capture`, or as
:class:`modeltap.Report` (what ``modeltap report`` prints); judge it with
``capture.expect`` (:class:`modeltap.Verdict`: passed, failed or unavailable),
the argument matchers of :mod:`modeltap.match`, and :func:`modeltap.verdicts`
to roll several up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from modeltap import match
    from modeltap.evidence.capture import Capture
    from modeltap.evidence.verdicts import Verdict, Verdicts, verdicts
    from modeltap.report.types import Report


def __getattr__(name: str) -> Any:
    # Lazy, so `import modeltap` stays cheap and the core stays importable alone.
    if name == "Capture":
        from modeltap.evidence.capture import Capture

        return Capture
    if name == "Report":
        from modeltap.report.types import Report

        return Report
    if name in ("Verdict", "Verdicts", "verdicts"):
        from modeltap.evidence import verdicts as verdict_layer

        return getattr(verdict_layer, name)
    if name == "match":
        import modeltap.match

        return modeltap.match
    raise AttributeError(name)


__all__ = ["Capture", "Report", "Verdict", "Verdicts", "__version__", "match", "verdicts"]
