"""Where two request bodies differ: JSON paths with sizes, content only when asked."""

from __future__ import annotations

from modeltap.replay.request_diff import body_changes, summarize

SECRET = "sk-PLANTED-diff-3f9a"


def texts(old: object, new: object, **kw: object) -> list[str]:
    return [str(c) for c in body_changes(old, new, **kw)]  # type: ignore[arg-type]


def test_a_changed_value_is_its_path_and_sizes() -> None:
    old = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 412}]}]}
    new = {"messages": [{"role": "user", "content": [{"type": "text", "text": "é" * 199}]}]}
    assert texts(old, new) == ["messages[0].content[0].text: 412 -> 398 bytes"]
    assert texts({"a": "abc"}, {"a": "abd"}) == ["a: changed (3 bytes)"]
    assert texts({"a": 1}, {"a": "1"}) == ["a: number -> string (1 -> 1 bytes)"]
    assert texts({"a": 1}, {"a": 1}) == []


def test_an_inserted_message_is_one_addition_not_a_shift() -> None:
    msgs = [{"role": "user", "content": f"question {i}"} for i in range(5)]
    new = [*msgs[:2], {"role": "user", "content": "new"}, *msgs[2:]]
    assert texts({"messages": msgs}, {"messages": new}) == ["messages[2]: added (31 bytes)"]
    assert texts({"messages": msgs}, {"messages": msgs[:4]}) == ["messages[4]: removed (38 bytes)"]
    assert texts({"tool_choice": "auto"}, {}) == ["tool_choice: removed (4 bytes)"]


def test_no_content_unless_asked_and_never_a_credential() -> None:
    old = {"messages": [{"content": "hello there"}], "api_key": SECRET, "x": {"token": SECRET}}
    new = {"messages": [{"content": "hello world"}], "api_key": SECRET + "2", "x": {"token": "t"}}
    plain = body_changes(old, new)
    assert all(c.content is None for c in plain)
    joined = " ".join(str(c) for c in plain)
    assert "hello" not in joined and SECRET not in joined
    shown = body_changes(old, new, show_content=True)
    assert len(shown) == 3  # the loop below checks the two credential changes
    assert shown[0].content == '"hello there" -> "hello world"'
    for change in shown[1:]:
        assert change.content == "(not shown: the key names a credential)"
    assert SECRET not in repr(shown)


def test_free_text_keys_are_shown_by_size() -> None:
    old = {"metadata2": {"what the user typed as a key": 1}}
    new = {"metadata2": {"what the user typed as a key": 2}}
    assert texts(old, new) == ["metadata2[<key of 28 bytes>]: changed (1 bytes)"]


def test_ignored_keys_and_summaries() -> None:
    assert texts({"metadata": 1, "a": 1}, {"metadata": 2, "a": 1}, ignore={"metadata"}) == []
    many = body_changes({"a": list(range(20))}, {"a": [i + 100 for i in range(20)]})
    assert summarize(many, limit=2)[-1] == f"and {len(many) - 2} more"
    assert texts([1], {"a": 1}) == ["$: array -> object (3 -> 7 bytes)"]
