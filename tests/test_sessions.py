"""The run's sessions: open, resumable conversations, ended for good, bounded."""

from __future__ import annotations

import pytest

import modeltap.core.sessions
from modeltap.core.sessions import Sessions


def test_a_session_opens_on_first_use_with_the_budget() -> None:
    sessions = Sessions("run")
    sessions.max_tool_calls = 3
    tracker = sessions.get("s1")
    assert tracker is not None and tracker.max_tool_calls == 3
    assert sessions.get("s1") is tracker and list(sessions.open) == ["s1"]
    status = sessions.close("s1")
    assert (status.session_id, status.run_id) == ("s1", "run") and not sessions.open


def test_a_parked_conversation_resumes_and_an_ended_session_stays_ended() -> None:
    sessions = Sessions("run")
    tracker = sessions.get("thread")
    assert tracker is not None
    sessions.park("thread", tracker, sessions.close("thread"))
    assert sessions.get("thread") is tracker  # a reconnect continues it
    status = sessions.close("thread")
    sessions.park("thread", tracker, status)
    assert sessions.unpark("thread") == status and sessions.unpark("thread") is None
    sessions.end("thread", status)
    assert sessions.get("thread") is None and sessions.ended("thread") == status


def test_memory_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(modeltap.core.sessions, "ENDED_SESSIONS_KEPT", 2)
    monkeypatch.setattr(modeltap.core.sessions, "CLOSED_CONVERSATIONS_KEPT", 1)
    sessions = Sessions("run")
    for n in range(3):
        tracker = sessions.get(f"s{n}")
        assert tracker is not None
        status = sessions.close(f"s{n}")
        sessions.end(f"s{n}", status)
        sessions.park(f"c{n}", tracker, status)
    assert [sessions.ended(f"s{n}") is not None for n in range(3)] == [False, True, True]
    assert [sessions.unpark(f"c{n}") is not None for n in range(3)] == [False, False, True]
