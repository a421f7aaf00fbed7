"""JSONL files: one append per line, whole lines, flushed to the OS before we go on.

Each line is written with a single ``os.write`` on a descriptor opened with
``O_APPEND``, so concurrent exchanges, and several modeltap processes sharing
one out dir, never interleave: the kernel places each append whole at the end
of the file. There is no user-space buffer, so a line that was written
survives a crash of the proxy.

Two faults need more than that (SPEC section 8):

- **A torn line.** A write cut short by a full disk leaves a fragment without
  its newline, and the next append, by any process, would be glued onto it and
  be unreadable too. So every append runs under an exclusive ``flock`` of the
  file (every modeltap process takes it; it is held for one write) and first
  reads the file's last byte: when it is not a newline, the fragment is closed
  with :data:`TORN_MARK` in the same write as the new line. The mark holds no
  quote and no closing bracket, so the fragment stays one unparseable line
  (one load error), even when all that was lost was its newline, and the new
  line is whole.
- **A file renamed or deleted under us.** Before each append the path is
  checked (``stat``) against the open descriptor; when it names another file
  or none, the descriptor is closed and the path opened (created) again, so
  the line goes where readers look, never into an unlinked inode.
  :meth:`JsonlFile.append` says so and :class:`Sink` writes a
  ``file_reopened`` event for each session whose earlier lines the file may
  have held (``lost_lines``: its evidence is incomplete), as the proxy names
  them through :attr:`Sink.sessions_with_lines`; when it names none, one
  event for the session of the line that found the move, ``lost_lines`` false
  (true when nothing names sessions: that session may have had lines).

The cost of both, per line: a ``stat``, two ``flock`` calls, an ``lseek`` and
a one-byte ``pread`` beside the write, about 3 µs (bench/run.py, case ``sink``).

If the audit file cannot be written the caller must refuse the request
(SPEC section 8): :meth:`Sink.write_audit` raises :class:`SinkError`. The
descriptor is reopened on the next attempt, so the proxy recovers by itself
once the disk or the permissions are fixed.

Copies elsewhere (the OTLP log records of SPEC section 9) start here, so that
they are the local line byte for byte: :attr:`Sink.observer` is called with
each line after its append succeeded, never for a line that failed. What the
observer does can neither fail nor refuse the write: an exception it raises is
logged once and swallowed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from modeltap.evidence.records import (
    AUDIT_FILE,
    EVENTS_FILE,
    REOPEN_MISSING,
    REOPEN_REPLACED,
    SESSIONS_FILE,
    AuditRecord,
    Event,
    FileReopenedEvent,
    McpAuditRecord,
    to_json_line,
    utc_now,
)
from modeltap.rules.errors import SinkError

__all__ = [
    "AUDIT_FILE",
    "EVENTS_FILE",
    "REOPEN_MISSING",
    "REOPEN_REPLACED",
    "SESSIONS_FILE",
    "TORN_MARK",
    "JsonlFile",
    "LineObserver",
    "Sink",
]

#: Written after a torn fragment, before the next line (see the module docstring).
TORN_MARK = b" <torn write>\n"

#: What :attr:`Sink.observer` is called with: the file's name (``audit.jsonl``,
#: ``events.jsonl`` or ``sessions.jsonl``), the exact bytes appended (one whole
#: line, ``\n`` included) and the record or event they were made from.
LineObserver = Callable[[str, bytes, object], None]

_logger = logging.getLogger(__name__)


class JsonlFile:
    """One append-only JSONL file, shared safely with other processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._path = os.fspath(path)  # os.stat on a str is cheaper, once per line
        self._fd: int | None = None
        #: (st_dev, st_ino) of the open file, to notice a rename or delete.
        self._identity: tuple[int, int] | None = None
        #: Whether the last-byte check applies: a regular file we can read.
        self._checkable = True
        self._lock = threading.Lock()

    def append(self, line: bytes) -> str | None:
        """Append one whole line.

        Args:
            line: a complete JSON line ending in ``\\n``.

        Returns:
            ``None``, or why the file had to be opened again first
            (:data:`REOPEN_MISSING` or :data:`REOPEN_REPLACED`): the path had
            been deleted, renamed or replaced, and the line went to a new file
            at the path.

        Raises:
            SinkError: if the file cannot be opened or the line not written
                whole. Nothing is retried here: the caller decides.
        """
        with self._lock:
            try:
                reopened = self._check_path_locked()
                fd = self._fd if self._fd is not None else self._open_locked()
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    data = line if self._ends_whole(fd) else TORN_MARK + line
                    written = os.write(fd, data)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError as e:
                self._close_locked()
                # The errno name is enough to act on; the path is ours, not the client's.
                reason = os.strerror(e.errno or 0)
                raise SinkError(f"cannot write {self.path.name}: {reason}") from None
            if written != len(data):
                # A short write on a regular file means the disk filled up mid-line.
                # The fragment stays on disk; the next append (any process) closes it.
                self._close_locked()
                raise SinkError(f"short write to {self.path.name} (disk full?)")
            return reopened

    def close(self) -> None:
        """Close the descriptor; a later append reopens it."""
        with self._lock:
            self._close_locked()

    def _check_path_locked(self) -> str | None:
        """Close the descriptor if the path no longer names its file; say why."""
        if self._fd is None:
            return None
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            reason: str | None = REOPEN_MISSING
        else:
            reason = None if (st.st_dev, st.st_ino) == self._identity else REOPEN_REPLACED
        if reason is not None:
            self._close_locked()
        return reason

    def _open_locked(self) -> int:
        flags = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        readable = True
        try:
            fd = self._open_with(flags | os.O_RDWR)
        except PermissionError:
            # A file we may append to but not read: whole lines still, without
            # the torn-fragment check.
            fd = self._open_with(flags | os.O_WRONLY)
            readable = False
        st = os.fstat(fd)
        self._fd, self._identity = fd, (st.st_dev, st.st_ino)
        self._checkable = readable and stat.S_ISREG(st.st_mode)
        return fd

    def _open_with(self, flags: int) -> int:
        try:
            return os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            # The out dir itself was removed under a running proxy: make it again,
            # so the line still goes where readers look.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, flags, 0o644)

    def _ends_whole(self, fd: int) -> bool:
        """True when the file is empty or ends in a newline (no torn fragment)."""
        if not self._checkable:
            return True  # a device or a pipe (``/dev/full`` in the tests): no fragment to see
        size = os.lseek(fd, 0, os.SEEK_END)
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"

    def _close_locked(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = self._identity = None


class Sink:
    """The out dir: ``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl``."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.audit = JsonlFile(out_dir / AUDIT_FILE)
        self.events = JsonlFile(out_dir / EVENTS_FILE)
        self.sessions = JsonlFile(out_dir / SESSIONS_FILE)
        #: Events that could not be written (reported at exit; traffic goes on).
        self.events_lost = 0
        #: Set by the proxy: called with a file's name when it was opened again,
        #: returns the sessions that had lines before (it marks their evidence
        #: incomplete); each gets a ``file_reopened`` event.
        self.sessions_with_lines: Callable[[str], Iterable[str]] | None = None
        #: Set by whoever copies lines elsewhere (the OTLP log export): called
        #: after every successful append, see :data:`LineObserver`.
        self.observer: LineObserver | None = None
        self._observer_failed = False

    def prepare(self) -> None:
        """Create the out dir if needed, and check now that lines can go there.

        The files themselves are created by their first line; what is checked
        is that they could be: the dir takes a new file (a probe, removed at
        once) and each file that exists opens for appending. A read-only or
        immutable dir, a path that is a file, a file that is a directory fail
        here, at start-up, not at the first request.

        Raises:
            SinkError: naming the path and the OS's reason.
        """
        out = self.out_dir
        try:
            out.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise SinkError(f"cannot use {out} as the out dir: it is not a directory") from None
        except OSError as e:
            raise SinkError(f"cannot create the out dir {out}: {_reason(e)}") from None
        try:
            fd, probe = tempfile.mkstemp(prefix=".modeltap-probe-", dir=out)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise SinkError(f"cannot write in the out dir {out}: {_reason(e)}") from None
        for file in (self.audit, self.events, self.sessions):
            try:
                fd = os.open(file.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # made by its first line: the dir takes new files
            except OSError as e:
                raise SinkError(f"cannot append to {file.path}: {_reason(e)}") from None
            os.close(fd)

    def write_audit(self, record: AuditRecord | McpAuditRecord) -> None:
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
        reopened = self.audit.append(line)
        self._observe(AUDIT_FILE, line, record)
        if reopened is not None:
            self._reopened(self.audit, reopened, record.run_id, record.session_id)

    def write_event(self, event: Event) -> bool:
        """Write one events line. A failure is counted, never raised: events
        describe traffic that already happened, and refusing later traffic
        because of them would not bring them back.

        Returns:
            True if the line was written.
        """
        return self._write_counted(self.events, EVENTS_FILE, event)

    def write_session(self, status: object) -> bool:
        """Write one ``sessions.jsonl`` line; failures are counted like events."""
        return self._write_counted(self.sessions, SESSIONS_FILE, status)

    def _write_counted(self, file: JsonlFile, name: str, item: object) -> bool:
        """Append ``item``'s line to ``file``: a failure is counted in
        ``events_lost``, never raised; True if the line was written."""
        try:
            line = to_json_line(item)
            reopened = file.append(line)
        except (SinkError, TypeError):
            self.events_lost += 1
            return False
        self._observe(name, line, item)
        if reopened is not None:
            run_id, session_id = getattr(item, "run_id", ""), getattr(item, "session_id", "")
            self._reopened(file, reopened, str(run_id), str(session_id))
        return True

    def _observe(self, file: str, line: bytes, record: object) -> None:
        """Hand a written line to the observer; its failure is never the write's."""
        observer = self.observer
        if observer is None:
            return
        try:
            observer(file, line, record)
        except Exception:
            # The line is on disk: refusing the request now (or losing the event)
            # would be wrong. Say it once; the observer counts its own losses.
            if not self._observer_failed:
                self._observer_failed = True
                _logger.exception("modeltap: copying a %s line failed", file)

    def _reopened(self, file: JsonlFile, reason: str, run_id: str, session_id: str) -> None:
        """Say in ``events.jsonl`` that ``file`` was opened again at its path."""
        name = file.path.name
        if self.sessions_with_lines is None:
            # Nobody says which sessions had lines: the one at hand may have.
            named = [(session_id, True)]
        else:
            lost = dict.fromkeys(self.sessions_with_lines(name))
            named = [(s, True) for s in lost] or [(session_id, False)]
        ts = utc_now()
        for session, lost_lines in named:
            self.write_event(
                FileReopenedEvent(
                    ts=ts,
                    run_id=run_id,
                    session_id=session,
                    file=name,
                    reason=reason,
                    lost_lines=lost_lines,
                )
            )

    def close(self) -> None:
        """Close every file (lines are already on disk: nothing to flush)."""
        for f in (self.audit, self.events, self.sessions):
            f.close()


def _reason(error: OSError) -> str:
    return os.strerror(error.errno) if error.errno else type(error).__name__
