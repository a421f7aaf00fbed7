"""``modeltap demo``: a scripted agent and the recording that answers it, how
the demo shows the audit records (:func:`record_lines`), and where its files go
without ``--out`` (:func:`scratch_out`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from modeltap.evidence.records import OUT_FILES, AuditRecord
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


#: The prefix of a demo's own out dir (without ``--out``), in the temp dir.
SCRATCH_PREFIX: Final = "modeltap-demo-"
#: The file that marks such a dir as the demo's own: only those are removed.
SCRATCH_MARK: Final = ".modeltap-demo"
#: What the demo (and the ``modeltap view`` it points at) writes into it.
_SCRATCH_FILES: Final = frozenset({*OUT_FILES, SCRATCH_MARK, "view.html"})


def scratch_out(root: str | None = None) -> Path:
    """A new out dir for a demo run without ``--out``, the earlier ones gone.

    Each run's files stay for ``modeltap view`` to read until the next run;
    only the directories an earlier demo made itself are removed: in the
    temp dir, named :data:`SCRATCH_PREFIX`, marked with :data:`SCRATCH_MARK`,
    owned by this user, holding nothing but the demo's files. An ``--out``
    dir is never touched.

    Args:
        root: where to make it (the temp dir when ``None``).

    Returns:
        The new directory, marked.
    """
    base = Path(root or tempfile.gettempdir())
    for earlier in base.glob(SCRATCH_PREFIX + "*"):
        remove_scratch(earlier)
    out = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=base))
    (out / SCRATCH_MARK).touch()
    return out


def remove_scratch(directory: Path) -> None:
    """Remove a demo's own out dir (:func:`scratch_out`); anything else is left alone."""
    try:
        if directory.is_symlink() or not (directory / SCRATCH_MARK).is_file():
            return
        if directory.stat().st_uid != os.getuid():
            return
        if any(entry.name not in _SCRATCH_FILES for entry in directory.iterdir()):
            return
        shutil.rmtree(directory)
    except OSError:
        return  # another demo's, being written or removed: left for the next run
