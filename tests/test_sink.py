"""sink.py: whole lines after a torn write, a new file after a rename or delete."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from modeltap.evidence.records import ErrorEvent
from modeltap.evidence.sink import REOPEN_MISSING, REOPEN_REPLACED, TORN_MARK, JsonlFile, Sink

A, B = b'{"a":1}\n', b'{"b":2}\n'


def test_a_fragment_is_closed_by_the_next_append_from_any_writer(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    mine, other = JsonlFile(path), JsonlFile(path)
    assert mine.append(A) is None
    with path.open("ab") as f:  # what a write cut short leaves: no newline
        f.write(A[:-1])
    assert other.append(B) is None
    assert path.read_bytes() == A + A[:-1] + TORN_MARK + B
    lines = path.read_bytes().splitlines()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(lines[1])  # the fragment stays one unreadable line, even whole JSON
    assert orjson.loads(lines[2]) == {"b": 2}
    assert mine.append(A) is None  # a whole file gets no mark
    assert path.read_bytes().endswith(B + A)


@pytest.mark.parametrize("how", ["rename", "delete", "replace", "rmdir"])
def test_a_moved_file_is_reopened_at_its_path(tmp_path: Path, how: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    path = out / "x.jsonl"
    jsonl = JsonlFile(path)
    jsonl.append(A)
    if how == "rename":
        path.rename(out / "x.1")
    elif how == "delete":
        path.unlink()
    elif how == "replace":
        path.rename(out / "x.1")
        path.write_bytes(B)
    else:
        path.unlink()
        out.rmdir()
    expected = REOPEN_REPLACED if how == "replace" else REOPEN_MISSING
    assert jsonl.append(A) == expected
    assert jsonl.append(A) is None  # once
    assert path.read_bytes() == (B if how == "replace" else b"") + A + A


def test_the_sink_says_which_file_it_reopened(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.prepare()
    event = ErrorEvent(
        ts="2025-01-01T00:00:00.000Z", run_id="r", session_id="s", error="client_gone",
        message="m", transport="http", method="POST", path="/v1/x",
    )  # fmt: skip
    assert sink.write_event(event)
    os.unlink(tmp_path / "events.jsonl")
    assert sink.write_event(event)
    lines = [orjson.loads(line) for line in (tmp_path / "events.jsonl").read_bytes().splitlines()]
    assert [line["kind"] for line in lines] == ["error", "file_reopened"]
    assert (lines[1]["file"], lines[1]["reason"], lines[1]["session_id"]) == (
        "events.jsonl",
        "missing",
        "s",
    )
    sink.close()


def test_the_proxy_names_the_sessions_that_lost_lines(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.prepare()
    asked: list[str] = []

    def sessions_with_lines(file: str) -> list[str]:
        asked.append(file)
        return ["a", "b", "a"] if len(asked) == 1 else []

    sink.sessions_with_lines = sessions_with_lines
    event = ErrorEvent(
        ts="2025-01-01T00:00:00.000Z", run_id="r", session_id="s", error="client_gone",
        message="m", transport="http", method="POST", path="/v1/x",
    )  # fmt: skip

    def written() -> list[tuple[str, str, bool | None]]:
        path = tmp_path / "events.jsonl"
        lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        path.unlink()
        return [(line["kind"], line["session_id"], line.get("lost_lines")) for line in lines]

    assert sink.write_event(event)
    written()
    assert sink.write_event(event)  # two sessions had lines: each is told, once
    assert written() == [
        ("error", "s", None),
        ("file_reopened", "a", True),
        ("file_reopened", "b", True),
    ]
    assert sink.write_event(event)  # none had: one event, nothing lost
    assert written() == [("error", "s", None), ("file_reopened", "s", False)]
    assert asked == ["events.jsonl", "events.jsonl"]
    sink.close()


# --------------------------------------------------------------------------
# The observer: copies start from the exact bytes written, and never fail a write


def test_the_observer_gets_each_written_line_byte_for_byte(tmp_path: Path) -> None:
    from modeltap.evidence.records import SessionStatus
    from tests.factories import audit_record, response_event

    sink = Sink(tmp_path)
    sink.prepare()
    seen: list[tuple[str, bytes, object]] = []
    sink.observer = lambda file, line, record: seen.append((file, line, record))
    record, event = audit_record(), response_event()
    status = SessionStatus(
        run_id="r",
        session_id="s",
        ts="2025-01-01T00:00:00.000Z",
        stop_reason="completed",
        requests_audited=1,
        refusals=0,
        tool_calls_admitted=0,
        evidence_complete=True,
    )
    sink.write_audit(record)
    assert sink.write_event(event)
    assert sink.write_session(status)
    assert seen == [
        ("audit.jsonl", (tmp_path / "audit.jsonl").read_bytes(), record),
        ("events.jsonl", (tmp_path / "events.jsonl").read_bytes(), event),
        ("sessions.jsonl", (tmp_path / "sessions.jsonl").read_bytes(), status),
    ]


def test_an_observer_that_raises_never_fails_the_write(tmp_path: Path) -> None:
    from tests.factories import audit_record, response_event

    sink = Sink(tmp_path)
    sink.prepare()

    def broken(file: str, line: bytes, record: object) -> None:
        raise RuntimeError("copy failed")

    sink.observer = broken
    sink.write_audit(audit_record())  # no SinkError: the line is on disk, the request may go
    assert sink.write_event(response_event())
    assert sink.events_lost == 0
    assert len((tmp_path / "audit.jsonl").read_bytes().splitlines()) == 1


def test_the_observer_never_hears_of_a_line_that_was_not_written(tmp_path: Path) -> None:
    from modeltap.rules.errors import SinkError
    from tests.factories import audit_record, response_event

    sink = Sink(tmp_path / "out")
    sink.prepare()
    seen: list[str] = []
    sink.observer = lambda file, line, record: seen.append(file)
    for name in ("audit.jsonl", "events.jsonl"):
        (tmp_path / "out" / name).mkdir()  # a directory where the file should be: unwritable
    with pytest.raises(SinkError):
        sink.write_audit(audit_record())
    assert not sink.write_event(response_event())
    assert seen == []
