"""Matching a replayed run against a recording, and the diff's wording."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from modeltap.matching import EXHAUSTED, MISMATCH, Player, describe_changes
from modeltap.recording import Entry, Recording, TurnKey
from modeltap.records import API_CHAT

KEY = TurnKey(
    model="gpt-5",
    tool_names=("lookup", "fetch"),
    instructions_sha256="a" * 64,
    image_count=0,
    stream=False,
    input_sha256="b" * 64,
)


def entry(
    index: int, session: str, order: int, key: TurnKey = KEY, transport: str = "http"
) -> Entry:
    line = {"kind": "http", "session_id": session, "order": order, "method": "POST", "path": "/p"}
    return Entry(index, line, key, session, order, transport, API_CHAT)


def recording(*entries: Entry) -> Recording:
    return Recording(Path("/nowhere"), list(entries))


def test_changes_are_named_most_specific_first() -> None:
    recorded = entry(0, "s", 1)
    assert describe_changes(recorded, "http", API_CHAT, KEY) == []
    assert describe_changes(recorded, "http", API_CHAT, replace(KEY, tool_names=("lookup",))) == [
        "tool 'fetch' no longer advertised"
    ]
    assert describe_changes(
        recorded, "websocket", API_CHAT, replace(KEY, model="gpt-6", input_sha256="c" * 64)
    ) == ["transport changed (http -> websocket)", "model changed ('gpt-5' -> 'gpt-6')"]
    assert describe_changes(recorded, "http", API_CHAT, replace(KEY, input_sha256="c" * 64)) == [
        "input changed (sha256 bbbbbbbb… -> cccccccc…)"
    ]
    assert describe_changes(recorded, "http", API_CHAT, replace(KEY, tool_names=None)) == [
        "tool catalogue changed ([lookup, fetch] -> not stated)"
    ]


def test_turns_play_in_order_and_a_mismatch_uses_its_turn_up() -> None:
    player = Player(recording(entry(0, "s1", 1), entry(1, "s1", 2), entry(2, "s1", 3)))
    assert player.play("s1", "http", API_CHAT, KEY).entry is not None
    played = player.play("s1", "http", API_CHAT, replace(KEY, stream=True))
    assert (played.entry, played.code) == (None, MISMATCH)
    assert played.problems[0].message == "session s1 turn 2: stream changed (false -> true)"
    assert player.play("s1", "http", API_CHAT, KEY).entry == entry(2, "s1", 3)
    exhausted = player.play("s1", "http", API_CHAT, KEY)
    assert exhausted.code == EXHAUSTED and "3 turns recorded" in exhausted.problems[0].message
    assert player.unplayed() == []


def test_unnamed_sessions_pair_up_by_order_and_transport() -> None:
    player = Player(recording(entry(0, "run-a", 1), entry(1, "ws-a", 1, transport="websocket")))
    assert player.play("ws-b", "websocket", API_CHAT, KEY).entry == entry(
        1, "ws-a", 1, transport="websocket"
    )
    assert player.play("run-b", "http", API_CHAT, KEY).entry == entry(0, "run-a", 1)
    left = player.play("other", "http", API_CHAT, KEY)
    assert left.code == EXHAUSTED and "no session left" in left.problems[0].message
    assert player.turns_recorded == 2


def test_what_was_not_replayed_is_listed() -> None:
    player = Player(recording(entry(0, "s1", 1), entry(1, "s1", 2), entry(2, "s2", 1)))
    player.play("s1", "http", API_CHAT, KEY)
    assert [p.message for p in player.unplayed()] == [
        "session s1: turns 2-2 of 2 were not replayed",
        "session s2: not replayed (1 turns recorded)",
    ]
