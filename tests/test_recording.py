"""The recording format alone: turn keys, the blob store, index lines, reading back."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from modeltap.replay.recording import (
    BLOBS_DIR,
    RECORDING_FILE,
    BlobStore,
    Recording,
    RecordingError,
    TurnKey,
    index_line,
    input_sha256,
    is_ws_create,
    kept_headers,
)
from modeltap.rules.routing import RouteTable
from tests.conftest import exchange_view
from tests.factories import audit_record

RECORD = audit_record(
    seq=4,
    session_id="s1",
    tool_names=("lookup",),
    image_details=("low", None),
    image_count=2,
    instructions_sha256="ab" * 32,
    stream=True,
)
ROUTE = next(r for r in RouteTable.build([], None).routes if r.name == "openai")
VIEW = exchange_view(
    path="/v1/chat/completions?key=sk-1&api-version=2024-10-21", route=ROUTE, record=RECORD, turn=2
)


def test_the_input_hash_ignores_volatile_fields_and_key_order() -> None:
    a = {"model": "m", "messages": [1], "metadata": {"user_id": "x"}, "user": "u"}
    b = {"messages": [1], "model": "m"}
    assert input_sha256(a) == input_sha256(b) != input_sha256({"model": "m", "messages": [2]})


def gemini_turn(call_ids: tuple[str, str], answer_ids: tuple[str, str]) -> dict[str, object]:
    """A Gemini history: two calls, then their results, with the ids given."""
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "Compare the two."}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": call_ids[0], "name": "a", "args": {}}},
                    {"function_call": {"id": call_ids[1], "name": "b", "args": {}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": answer_ids[0], "name": "a", "response": {}}},
                    {"functionResponse": {"id": answer_ids[1], "name": "b", "response": {}}},
                ],
            },
        ]
    }


def test_gemini_call_ids_count_by_position_not_by_value() -> None:
    """Gemini CLI makes up ids that differ on every run (read_file_<ms>_<n>)."""
    run1 = gemini_turn(("read_file_1_0", "read_file_1_1"), ("read_file_1_0", "read_file_1_1"))
    run2 = gemini_turn(("read_file_2_0", "read_file_2_1"), ("read_file_2_0", "read_file_2_1"))
    swapped = gemini_turn(("read_file_2_0", "read_file_2_1"), ("read_file_2_1", "read_file_2_0"))
    api = "gemini.generate_content"
    assert input_sha256(run1, api) == input_sha256(run2, api)
    # Which result answers which call still counts.
    assert input_sha256(swapped, api) != input_sha256(run2, api)
    # Other APIs compare ids as sent.
    assert input_sha256(run1) != input_sha256(run2)
    assert input_sha256(run1, "openai.chat_completions") != input_sha256(
        run2, "openai.chat_completions"
    )


def test_code_assist_per_run_ids_are_left_out() -> None:
    def wrapped(prompt_id: str, session: str, text: str = "hi") -> dict[str, object]:
        request = {"contents": [{"role": "user", "parts": [{"text": text}]}], "session_id": session}
        return {
            "model": "gemini-3-flash",
            "project": "p",
            "user_prompt_id": prompt_id,
            "request": request,
        }

    api = "gemini.generate_content"
    assert input_sha256(wrapped("p1", "s1"), api) == input_sha256(wrapped("p2", "s2"), api)
    assert input_sha256(wrapped("p1", "s1"), api) != input_sha256(wrapped("p1", "s1", "ho"), api)


def test_a_turn_key_round_trips() -> None:
    key = TurnKey.of(RECORD, {"model": "gpt-5"})
    assert (key.model, key.tool_names, key.image_count, key.stream) == (
        "gpt-5",
        ("lookup",),
        2,
        True,
    )
    assert TurnKey.from_json(orjson.loads(orjson.dumps(key.to_json()))) == key
    with pytest.raises(ValueError, match="bad turn key"):
        TurnKey.from_json({"model": "m"})


def test_index_lines_keep_no_secret_and_number_turns() -> None:
    key = TurnKey.of(RECORD, {})
    line = index_line("http", VIEW, key)
    assert (line["order"], line["seq"], line["method"], line["route"]) == (2, 4, "POST", "openai")
    assert line["path"] == "/v1/chat/completions?key=REDACTED&api-version=2024-10-21"
    turn = index_line("websocket", VIEW, key)
    assert (turn["transport"], turn["method"], turn["seq"]) == ("websocket", "GET", None)
    passed = index_line("unaudited", VIEW, None)
    assert (passed["order"], passed["key"]) == (None, None)


def test_only_allow_listed_headers_are_kept() -> None:
    headers = {
        "content-type": "application/json",
        "authorization": "Bearer sk",
        "x-request-id": "1",
    }
    assert kept_headers(headers) == {"content-type": "application/json", "x-request-id": "1"}


def test_ws_creates_are_told_apart() -> None:
    assert is_ws_create(b'{"type": "response.create"}')
    assert not is_ws_create(b'{"type": "response.processed"}')
    assert not is_ws_create(b"not json")


def test_the_blob_store_keeps_each_body_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    sha = store.put(b"body")
    assert store.put(b"body") == sha and store.path(sha).read_bytes() == b"body"
    with pytest.raises(ValueError, match="64 hex digits"):
        store.path("../../etc/passwd")
    writer = store.writer()
    for piece in (b"a", b"b"):
        writer.write(piece)
    streamed = writer.finish()
    assert streamed is not None and store.path(streamed).read_bytes() == b"ab"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({sha, streamed})


def write_recording(root: Path, *lines: dict[str, object]) -> None:
    (root / BLOBS_DIR).mkdir(parents=True)
    (root / RECORDING_FILE).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def test_reading_back(tmp_path: Path) -> None:
    key = TurnKey.of(RECORD, {}).to_json()
    write_recording(
        tmp_path,
        {"v": 1, "kind": "http", "session_id": "s1", "order": 2, "key": key, "route": "vllm",
         "upstream": "http://10.0.0.1:8000/base"},
        {"v": 1, "kind": "http", "session_id": "s1", "order": 1, "key": key},
        {"v": 1, "kind": "unaudited", "session_id": "s1", "order": None, "method": "GET"},
    )  # fmt: skip
    recording = Recording.load(tmp_path)
    assert [e.order for e in recording.sessions["s1"]] == [1, 2]
    assert [e.method for e in recording.unaudited] == ["GET"]
    routes, upstream = recording.routes_to("http://127.0.0.1:5")
    assert "vllm=http://127.0.0.1:5/base" in routes and upstream is None


def test_a_replayed_route_keeps_its_recorded_provider(tmp_path: Path) -> None:
    """A Bedrock route replays as Bedrock (its errors, its header facts, its records)."""
    key = TurnKey.of(RECORD, {}).to_json()
    write_recording(
        tmp_path,
        {"v": 1, "kind": "http", "session_id": "s1", "order": 1, "key": key, "route": "bedrock",
         "provider": "aws.bedrock", "upstream": "http://10.0.0.1:8000"},
        {"v": 1, "kind": "http", "session_id": "s1", "order": 2, "key": key, "route": "odd",
         "provider": "a,provider=b", "upstream": "http://10.0.0.1:8000"},
        {"v": 1, "kind": "http", "session_id": "s1", "order": 3, "key": key, "route": "upstream",
         "provider": "gcp.vertex_ai", "upstream": "http://10.0.0.1:8000/v1"},
    )  # fmt: skip
    routes, upstream = Recording.load(tmp_path).routes_to("http://127.0.0.1:5")
    assert "bedrock=http://127.0.0.1:5,provider=aws.bedrock" in routes
    assert "odd=http://127.0.0.1:5" in routes  # not a provider name: left out
    assert upstream == "http://127.0.0.1:5/v1"  # --upstream takes no provider
    RouteTable.build(routes, upstream)  # every one parses


@pytest.mark.parametrize("text", [b"not json\n", b'{"v": 2}\n', b'{"v": 1, "key": {"model": 1}}\n'])
def test_a_malformed_recording_is_named_by_line(tmp_path: Path, text: bytes) -> None:
    (tmp_path / RECORDING_FILE).write_bytes(b"\n" + text)
    with pytest.raises(RecordingError, match="line 2"):
        Recording.load(tmp_path)


def test_what_is_not_a_recording_says_what_to_give(tmp_path: Path) -> None:
    """A missing dir, a run's --out given instead of its --record, and a
    --record dir nothing went through: each says what a recording is."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "audit.jsonl").write_bytes(b"")
    (tmp_path / "rec" / "blobs").mkdir(parents=True)  # what a run with no traffic leaves
    expected = {
        "missing": f"no such directory: {tmp_path / 'missing'} (a recording is the DIR of "
        "`modeltap run --record DIR`)",
        "out": f"{tmp_path / 'out'} is a capture (a run's --out), not a recording: no "
        "recording.jsonl (a recording is the DIR of `modeltap run --record DIR`)",
        "rec": f"{tmp_path / 'rec'} holds no recording.jsonl: nothing was recorded there (no "
        f"exchange went through `modeltap run --record {tmp_path / 'rec'}`)",
    }
    for name, message in expected.items():
        with pytest.raises(RecordingError) as failed:
            Recording.load(tmp_path / name)
        assert str(failed.value) == message
