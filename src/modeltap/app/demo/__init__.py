"""``modeltap demo``: a scripted agent and the recording that answers it, and
how the demo shows the audit records (:func:`record_lines`)."""

from __future__ import annotations

from collections.abc import Sequence

from modeltap.evidence.records import AuditRecord
from modeltap.report.text import table_lines


def record_lines(records: Sequence[AuditRecord]) -> list[str]:
    """The audit records as an aligned table, one row per record, in the
    report's style: what the record holds, not its 800-character JSON.

    Args:
        records: the audit records, in order.

    Returns:
        A header row and a row per record (seq, model, tools advertised, tool
        results sent back as ``call_id`` and size, instructions hash prefix,
        body size); none when there are no records.
    """
    if not records:
        return []
    rows = [["seq", "model", "tools advertised", "tool results sent", "instructions", "body"]]
    for r in records:
        tools = "not stated" if r.tool_names is None else ", ".join(r.tool_names) or "-"
        results = ", ".join(f"{t.call_id or '?'} {t.bytes} B" for t in r.tool_results) or "-"
        sha = r.instructions_sha256
        rows.append(
            [
                str(r.seq), r.model, tools, results,
                "not stated" if sha is None else sha[:8] + "…", f"{r.body_bytes:,} B",
            ]
        )  # fmt: skip
    return table_lines(rows, right={0, 5})
