"""Matching a replayed run against a recording, and the diff's wording."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.replay.matching import EXHAUSTED, MISMATCH, Player, describe_changes
from modeltap.replay.recording import Entry, Recording, TurnKey

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


def key(n: int) -> TurnKey:
    """A distinct request: its input hash says which."""
    return replace(KEY, input_sha256=f"{n:064x}")


def test_changes_are_named_most_specific_first() -> None:
    recorded = entry(0, "s", 1)
    assert describe_changes(recorded, "http", API_CHAT, KEY) == ([], [])
    assert describe_changes(recorded, "http", API_CHAT, replace(KEY, tool_names=("lookup",)))[
        0
    ] == ["tool 'fetch' no longer advertised"]
    assert describe_changes(
        recorded, "websocket", API_CHAT, replace(KEY, model="gpt-6", input_sha256="c" * 64)
    )[0] == ["transport changed (http -> websocket)", "model changed ('gpt-5' -> 'gpt-6')"]
    # Without the bodies, the hash is all there is to say.
    assert describe_changes(recorded, "http", API_CHAT, replace(KEY, input_sha256="c" * 64))[0] == [
        "input changed (sha256 bbbbbbbb… -> cccccccc…)"
    ]
    assert describe_changes(recorded, "http", API_CHAT, replace(KEY, tool_names=None))[0] == [
        "tool catalogue changed ([lookup, fetch] -> not stated)"
    ]


def test_with_the_bodies_a_change_is_a_json_path_with_sizes() -> None:
    recorded = entry(0, "s", 1)
    old = {
        "model": "gpt-5",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "a" * 412}]},
        ],
        "metadata": {"user_id": "x"},
    }
    new = {
        "model": "gpt-6",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "b" * 398}]},
        ],
        "metadata": {"user_id": "y"},  # volatile: never compared
    }
    changed = replace(KEY, model="gpt-6", input_sha256="c" * 64)
    phrases, changes = describe_changes(recorded, "http", API_CHAT, changed, (old, new))
    # The model is said by its own phrase; the path names where the input changed.
    assert phrases == [
        "model changed ('gpt-5' -> 'gpt-6')",
        "messages[1].content[0].text: 412 -> 398 bytes",
    ]
    assert [c.content for c in changes] == [None]  # no content unless asked for
    _, shown = describe_changes(recorded, "http", API_CHAT, changed, (old, new), show_content=True)
    assert shown[0].content is not None and shown[0].content.startswith('"aaaa')


def test_turns_play_in_order_and_a_change_gives_one_line() -> None:
    """A changed turn: one mismatch line; the turns after it still line up."""
    player = Player(recording(*(entry(i, "s1", i + 1, key(i)) for i in range(4))))
    assert player.play("s1", "http", API_CHAT, key(0)).entry == entry(0, "s1", 1, key(0))
    played = player.play("s1", "http", API_CHAT, replace(key(1), stream=True))
    assert (played.entry, played.code) == (None, MISMATCH)
    assert [p.message for p in played.problems] == [
        "session s1 turn 2: stream changed (false -> true)"
    ]
    # The same changed request again (a retry): the same error, no new line.
    again = player.play("s1", "http", API_CHAT, replace(key(1), stream=True))
    assert (again.entry, again.problems, again.code) == (None, (), MISMATCH)
    assert "turn 2: stream changed" in again.error_message
    assert player.play("s1", "http", API_CHAT, key(2)).problems == ()
    assert player.play("s1", "http", API_CHAT, key(3)).entry == entry(3, "s1", 4, key(3))
    exhausted = player.play("s1", "http", API_CHAT, key(4))
    assert exhausted.code == EXHAUSTED
    assert "the recording is exhausted (4 turns recorded)" in exhausted.problems[0].message
    assert player.unplayed() == []


def test_an_inserted_turn_gives_one_line() -> None:
    player = Player(recording(*(entry(i, "s1", i + 1, key(i)) for i in range(3))))
    player.play("s1", "http", API_CHAT, key(0))
    inserted = player.play("s1", "http", API_CHAT, key(99))
    assert inserted.code == MISMATCH and len(inserted.problems) == 1
    # The next request is recorded turn 2: the new one was inserted before it.
    rest = [player.play("s1", "http", API_CHAT, key(i)) for i in (1, 2)]
    assert [p.entry for p in rest] == [entry(1, "s1", 2, key(1)), entry(2, "s1", 3, key(2))]
    assert [p.problems for p in rest] == [(), ()]
    assert player.unplayed() == []


def test_a_deleted_turn_gives_one_line() -> None:
    player = Player(recording(*(entry(i, "s1", i + 1, key(i)) for i in range(5))))
    player.play("s1", "http", API_CHAT, key(0))
    skipped = player.play("s1", "http", API_CHAT, key(3))  # turns 2 and 3 left out
    assert skipped.entry == entry(3, "s1", 4, key(3))
    assert [(p.kind, p.message) for p in skipped.problems] == [
        (
            "skipped",
            "session s1: recorded turns 2-3 were not asked for (turn 2 asked for recorded turn 4)",
        )
    ]
    last = player.play("s1", "http", API_CHAT, key(4))
    assert (last.entry, last.problems) == (entry(4, "s1", 5, key(4)), ())
    assert player.unplayed() == []


def test_after_a_deletion_turn_numbers_name_both_runs() -> None:
    player = Player(recording(*(entry(i, "s1", i + 1, key(i)) for i in range(4))))
    player.play("s1", "http", API_CHAT, key(1))  # recorded turn 1 left out
    played = player.play("s1", "http", API_CHAT, replace(key(2), stream=True))
    assert played.problems[0].message == (
        "session s1 turn 2 (recorded turn 3): stream changed (false -> true)"
    )
    assert (played.problems[0].turn, played.problems[0].live_turn) == (3, 2)


def test_requests_that_match_nothing_compare_with_the_next_turns() -> None:
    """A change carried on (each later request differs too): a line per differing
    request, each against its own recorded turn, never a shifted comparison."""
    player = Player(recording(*(entry(i, "s1", i + 1, key(i)) for i in range(3))))
    first = player.play("s1", "http", API_CHAT, replace(key(0), stream=True))
    second = player.play("s1", "http", API_CHAT, replace(key(1), stream=True))
    assert [p.turn for p in (*first.problems, *second.problems)] == [1, 2]
    assert [p.message for p in player.unplayed()] == ["session s1: turn 3 of 3 was not replayed"]


def test_unnamed_sessions_pair_up_by_order_and_transport() -> None:
    player = Player(recording(entry(0, "run-a", 1), entry(1, "ws-a", 1, transport="websocket")))
    assert player.play("ws-b", "websocket", API_CHAT, KEY).entry == entry(
        1, "ws-a", 1, transport="websocket"
    )
    assert player.play("run-b", "http", API_CHAT, KEY).entry == entry(0, "run-a", 1)
    left = player.play("other", "http", API_CHAT, KEY)
    assert left.code == EXHAUSTED and "no session left" in left.problems[0].message
    assert player.turns_recorded == 2


def test_what_was_not_replayed_is_listed_in_words() -> None:
    player = Player(
        recording(
            entry(0, "s1", 1, key(0)),
            entry(1, "s1", 2, key(1)),
            entry(2, "s2", 1),
            *(entry(3 + i, "s3", i + 1, key(i)) for i in range(3)),
        )
    )
    player.play("s1", "http", API_CHAT, key(0))
    player.play("s3", "http", API_CHAT, key(0))
    assert [p.message for p in player.unplayed()] == [
        "session s1: turn 2 of 2 was not replayed",
        "session s2: not replayed (1 turn recorded)",
        "session s3: turns 2-3 of 3 were not replayed",
    ]
