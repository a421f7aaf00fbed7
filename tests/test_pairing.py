"""The one pairing rule: by id, or by position for calls without one."""

from __future__ import annotations

from modeltap.evidence.pairing import MAX_NAMED_IDS, ToolPairing
from modeltap.evidence.records import ToolResult


def test_by_id_first_result_answers_every_call_of_that_id() -> None:
    pairing: ToolPairing[str] = ToolPairing()
    pairing.asked("c1", "first")
    pairing.asked("c2", "second")
    assert len(pairing) == 2
    results = (ToolResult("c2", 7), ToolResult("c2", 9), ToolResult("other", 1))
    assert pairing.peek(results) == [("second", 7)]
    assert len(pairing) == 2  # peek changes nothing
    assert pairing.answer(results) == [("second", 7)]
    assert pairing.answer(results) == []  # answered once
    assert list(pairing.waiting()) == [("c1", "first")]
    assert len(pairing) == 1


def test_by_position_the_newest_results_answer_the_waiting_calls_in_order() -> None:
    pairing: ToolPairing[str] = ToolPairing()
    pairing.asked(None, "a")
    pairing.asked(None, "b")
    # One result only: the count does not fit, nothing is answered.
    assert pairing.answer((ToolResult(None, 3),)) == []
    both = (ToolResult(None, 3), ToolResult(None, 4))
    assert pairing.peek(both) == [("a", 3), ("b", 4)]
    assert pairing.answer(both) == [("a", 3), ("b", 4)]
    pairing.asked(None, "c")
    # The whole history comes back, plus the new result: only "c" is new.
    assert pairing.answer((*both, ToolResult(None, 5))) == [("c", 5)]
    assert list(pairing.waiting()) == [] and len(pairing) == 0


def test_an_id_no_response_named_counts_as_without_id() -> None:
    """Gemini CLI gives an id-less call an id of its own making."""
    pairing: ToolPairing[str] = ToolPairing()
    pairing.asked("server-id", "named")
    pairing.asked(None, "anonymous")
    results = (ToolResult("server-id", 2), ToolResult("read_file_1700000000000_0", 8))
    assert pairing.answer(results) == [("named", 2), ("anonymous", 8)]


def test_a_session_without_id_less_calls_keeps_no_ids() -> None:
    pairing: ToolPairing[int] = ToolPairing()
    for number in range(3):
        pairing.asked(f"c{number}", number)
    assert pairing._named is None
    # Results with unknown ids answer nothing (no call waits by position).
    assert pairing.answer((ToolResult("elsewhere", 1),)) == []


def test_past_the_bound_of_named_ids_pairing_by_position_stops() -> None:
    pairing: ToolPairing[int] = ToolPairing()
    pairing.asked(None, -1)
    for number in range(MAX_NAMED_IDS + 1):
        pairing.asked(f"c{number}", number)
    assert pairing._named is None
    assert pairing.answer((ToolResult(None, 1),)) == []
    assert (None, -1) in list(pairing.waiting())
