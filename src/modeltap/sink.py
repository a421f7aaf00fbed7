"""JSONL files: one append per line, flushed to the OS before we go on.

Each line is written with a single ``os.write`` on a descriptor opened with
``O_APPEND``, so concurrent exchanges, and several modeltap processes sharing
one out dir, never interleave or tear lines: the kernel places each append
whole at the end of the file. There is no user-space buffer, so a line that
was written survives a crash of the proxy.

If the audit file cannot be written the caller must refuse the request
(SPEC section 8): :meth:`Sink.write_audit` raises :class:`SinkError`. The
descriptor is reopened on the next attempt, so the proxy recovers by itself
once the disk or the permissions are fixed.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from modeltap.errors import SinkError
from modeltap.records import AuditRecord, Event, to_json_line

AUDIT_FILE = "audit.jsonl"
EVENTS_FILE = "events.jsonl"
SESSIONS_FILE = "sessions.jsonl"


class JsonlFile:
    """One append-only JSONL file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def append(self, line: bytes) -> None:
        """Append one whole line.

        Args:
            line: a complete JSON line ending in ``\\n``.

        Raises:
            SinkError: if the file cannot be opened or the line not written
                whole. Nothing is retried here: the caller decides.
        """
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = os.open(
                        self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
                    )
                written = os.write(self._fd, line)
            except OSError as e:
                self._close_locked()
                # The errno name is enough to act on; the path is ours, not the client's.
                reason = os.strerror(e.errno or 0)
                raise SinkError(f"cannot write {self.path.name}: {reason}") from None
            if written != len(line):
                # A short write on a regular file means the disk filled up mid-line.
                # The partial line stays torn on disk; readers name it. Reopen next time.
                self._close_locked()
                raise SinkError(f"short write to {self.path.name} (disk full?)")

    def close(self) -> None:
        """Close the descriptor; a later append reopens it."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class Sink:
    """The out dir: ``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl``."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.audit = JsonlFile(out_dir / AUDIT_FILE)
        self.events = JsonlFile(out_dir / EVENTS_FILE)
        self.sessions = JsonlFile(out_dir / SESSIONS_FILE)
        #: Events that could not be written (reported at exit; traffic goes on).
        self.events_lost = 0

    def prepare(self) -> None:
        """Create the out dir if needed.

        Raises:
            SinkError: if it cannot be created.
        """
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SinkError(f"cannot create the out dir: {os.strerror(e.errno or 0)}") from None

    def write_audit(self, record: AuditRecord) -> None:
        """Write one audit line before its request is forwarded.

        Raises:
            SinkError: the request must then be refused (503), not forwarded.
        """
        try:
            line = to_json_line(record)
        except TypeError:
            # orjson cannot write it (nesting over 254 levels, say): refuse like any
            # other unwritable line. Never forward what could not be recorded.
            raise SinkError("the audit record could not be serialised") from None
        self.audit.append(line)

    def write_event(self, event: Event) -> bool:
        """Write one events line. A failure is counted, never raised: events
        describe traffic that already happened, and refusing later traffic
        because of them would not bring them back.

        Returns:
            True if the line was written.
        """
        try:
            self.events.append(to_json_line(event))
        except (SinkError, TypeError):
            self.events_lost += 1
            return False
        return True

    def write_session(self, status: object) -> bool:
        """Write one ``sessions.jsonl`` line; failures are counted like events."""
        try:
            self.sessions.append(to_json_line(status))
        except (SinkError, TypeError):
            self.events_lost += 1
            return False
        return True

    def close(self) -> None:
        """Close every file (lines are already on disk: nothing to flush)."""
        for f in (self.audit, self.events, self.sessions):
            f.close()
