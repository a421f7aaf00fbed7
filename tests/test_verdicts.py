"""Verdicts over real traffic: the official SDKs through the proxy against the stub.

Each scenario runs an agent's requests through a real proxy (complete tool
loops, a stream cut before its terminal event, a refused request, a tool call
that never got its result, no traffic at all), with and without ``--record``,
and checks each assertion's outcome and what the user reads then: a positive
assertion passes on evidence whatever the coverage; a gap never passes a
negative one or a bound (it is ``unavailable``, naming the channel, why, and
what would make it available); evidence that contradicts one fails it.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import pytest

from modeltap import Capture, match, verdicts
from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.evidence.verdicts import Verdict, watch_verdicts
from tests.conftest import Running
from tests.upstream import (
    Reply,
    Upstream,
    anthropic_text_json,
    anthropic_tool_json,
    chat_text_json,
    chat_tool_json,
    chat_tool_sse,
)

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("lookup", "refund", "delete_account")
]
ANTHROPIC_TOOLS = [
    {"name": name, "input_schema": {"type": "object"}}
    for name in ("lookup", "refund", "delete_account")
]
REFUND_ARGS = '{"amount": 500.0, "order": "o-181", "note": "181,001 points", "tags": ["vip", "eu"]}'


def openai_client(running: Running) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{running.base()}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(trust_env=False),
        default_headers={"x-modeltap-session": "refund-1"},
    )


def anthropic_client(running: Running, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=running.base(),
        api_key="sk-ant-test",
        max_retries=0,
        default_headers={"x-modeltap-session": session},
    )


def refund_loop(running: Running, final: str = "Your order o-181 was refunded.") -> None:
    """A chat tool loop: lookup, refund, then the final answer (three turns)."""
    running.upstream.replies.extend(
        [
            chat_tool_json("gpt-5", name="lookup", arguments='{"order": "o-181"}', call_id="c1"),
            chat_tool_json("gpt-5", name="refund", arguments=REFUND_ARGS, call_id="c2"),
            chat_text_json("gpt-5", text=final),
        ]
    )
    client = openai_client(running)
    messages: list[Any] = [
        {"role": "system", "content": "You are a billing agent."},
        {"role": "user", "content": "refund order o-181"},
    ]
    for _ in range(3):
        reply = client.chat.completions.create(model="gpt-5", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or ():
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "done"})


def recorded_refund_run(out: Path, record: Path) -> None:
    """:func:`refund_loop` through a proxy of its own, recorded, then stopped
    (for module-scoped fixtures, which cannot use ``start_proxy``)."""
    with Upstream() as upstream:
        config = ProxyConfig(
            listen_port=0,
            out=str(out),
            record=str(record),
            routes=[f"stub={upstream.url}"],
            quiet=True,
        )
        proxy = Proxy(config).start()
        try:
            refund_loop(Running(proxy, out, upstream))
        finally:
            proxy.stop()


def stopped(running: Running) -> Path:
    """Stop the proxy (every session gets its sessions.jsonl line); its out dir."""
    running.proxy.stop()
    return running.out


@pytest.fixture
def recorded(start_proxy: Callable[..., Running], tmp_path: Path) -> tuple[Path, Path]:
    """A complete refund loop, recorded: (out dir, record dir)."""
    record = tmp_path / "record"
    running = start_proxy(record=str(record))
    refund_loop(running)
    return stopped(running), record


def assert_unavailable(verdict: Verdict, channel: str, *said: str) -> None:
    assert verdict.status == "unavailable", str(verdict)
    assert not verdict
    assert verdict.channel == channel
    text = str(verdict)
    assert "UNAVAILABLE" in text and "It becomes available with" in text, text
    for part in said:
        assert part.casefold() in text.casefold(), text


# --------------------------------------------------------------------------
# A complete session


def test_a_complete_session_passes_and_fails_by_the_evidence(recorded: tuple[Path, Path]) -> None:
    out, record = recorded
    capture = Capture.load(out, record=record)
    expect = capture.expect

    called = expect.tool_called("refund", amount=500, order=match.regex("^o-"))
    assert called.status == "passed" and called
    assert called.details == (
        {
            "expected_tool": "refund",
            "args_asserted": {"amount": 500, "order": {"regex": "^o-"}},
            "matched_call_index": 1,
            "unmatched_reason": None,
        },
    )
    assert expect.tool_called("refund", note=match.fuzzy("181001 POINTS"))
    assert expect.tool_called("refund", tags=match.contains("vip"), amount=match.approx(500.0001))
    assert expect.tool_called("refund", amount=match.one_of(400, 500))
    assert expect.tool_called("lookup")

    wrong = expect.tool_called("refund", amount=400)
    assert wrong.status == "failed" and not wrong
    assert wrong.details is not None
    assert wrong.details[0]["matched_call_index"] == -1
    assert wrong.details[0]["unmatched_reason"] == (
        "call 1: arg 'amount' mismatch: expected 400, got 500.0"
    )
    assert "FAILED" in str(wrong) and "Expected a call of 'refund' with amount=400" in str(wrong)

    nothing = expect.tool_called("transfer")
    assert nothing.status == "failed"
    assert "no call to 'transfer' found (calls seen: lookup, refund)" in str(nothing)

    assert expect.tool_not_called("delete_account")
    assert expect.only_tools(["lookup", "refund"])
    outside = expect.only_tools(["lookup"])
    assert outside.status == "failed" and "call 1 (refund at turn 2)" in str(outside)
    assert expect.tools_in_order(["lookup", "refund"])
    order = expect.tools_in_order(["refund", "lookup"])
    assert order.status == "failed" and "matched 1 of 2" in str(order)
    assert expect.tool_call_count("refund", exactly=1)
    assert expect.tool_call_count("lookup", at_least=1, at_most=1)
    assert expect.tool_call_count("refund", at_least=2).status == "failed"
    assert expect.max_tool_calls(2)
    too_many = expect.max_tool_calls(1)
    assert too_many.status == "failed" and "2 tool calls seen, more than the 1 allowed" in str(
        too_many
    )

    assert expect.final_text_contains("REFUNDED")
    said = expect.final_text_contains("declined")
    assert said.status == "failed"
    assert "it says 'Your order o-181 was refunded.'" in str(said)
    assert expect.final_text_contains("Refunded", case_sensitive=True).status == "failed"

    assert expect.model_used("gpt-5")
    assert expect.model_used("gpt-4o").status == "failed"
    assert expect.only_models(["gpt-5"])
    assert expect.only_models(["gpt-4o"]).status == "failed"
    assert expect.tools_advertised(includes=["refund"], excludes=["transfer"])
    assert expect.tools_advertised(excludes=["delete_account"]).status == "failed"
    assert expect.instructions_unchanged()
    assert expect.max_tokens(1000)
    tokens = expect.max_tokens(10, kind="input")
    assert tokens.status == "failed" and "input tokens counted" in str(tokens)
    assert expect.max_cost(1.0)
    assert expect.completed()
    assert expect.that(lambda c: None if len(c.sessions) == 1 else "one session", needs=["actions"])
    mine = expect.that(lambda c: "the agent asked twice", name="asked once")
    assert mine.status == "failed" and str(mine).startswith("asked once on the capture: FAILED")

    session = capture.sessions["refund-1"]
    same = session.expect.tool_called("refund", amount=500, order=match.regex("^o-"))
    assert same.details == called.details
    last = session.turns[-1]
    assert last.expect.tool_not_called("refund")  # a turn's own calls
    assert last.expect.final_text_contains("refunded")
    assert session.turns[1].expect.tool_called("refund").details[0]["matched_call_index"] == 0


def test_without_a_recording_the_final_text_is_unavailable_and_says_how_to_get_it(
    recorded: tuple[Path, Path],
) -> None:
    out, _ = recorded
    verdict = Capture.load(out).expect.final_text_contains("refunded")
    assert_unavailable(
        verdict,
        "messages",
        "message content is not recorded",
        "modeltap run --record RDIR",
        "Capture.load(DIR, record=RDIR)",
    )
    # Still never a pass, and optional() keeps it listed while not failing.
    optional = verdict.optional()
    assert optional and optional.is_optional and optional.status == "unavailable"
    assert optional.to_dict()["optional"] is True
    assert "Marked optional" in str(optional)


def test_a_recording_of_another_run_holds_no_turn_of_this_one(
    start_proxy: Callable[..., Running], recorded: tuple[Path, Path]
) -> None:
    _, record = recorded
    other = start_proxy()
    refund_loop(other)
    verdict = Capture.load(stopped(other), record=record).expect.final_text_contains("x")
    # The same session and seq, but it was not recorded there: the turn keys differ.
    assert_unavailable(verdict, "messages", "this turn is not in the recording")


# --------------------------------------------------------------------------
# Incomplete sessions


def cut_anthropic_stream() -> Reply:
    """Text, then the stream is cut before the tool_use block and message_stop."""
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_cut",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 40, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Deleting your account now"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "delete_account",
                    "input": {},
                },
            },
        ),
    ]
    return Reply(sse=events, cut_after=3)


def test_a_stream_cut_before_its_end_leaves_absence_unproven(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    record = tmp_path / "record"
    running = start_proxy(record=str(record))
    running.upstream.replies.append(cut_anthropic_stream())
    client = anthropic_client(running, "cut")
    stream = client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "close my account"}],
        tools=ANTHROPIC_TOOLS,
    )
    with pytest.raises((anthropic.APIConnectionError, httpx.HTTPError)), stream as events:
        for _ in events:
            pass
    out = stopped(running)
    capture = Capture.load(out, record=record)

    # The trap: the old helper says "not called", the verdict cannot tell.
    assert not capture.tool_was_called("delete_account")
    verdict = capture.expect.tool_not_called("delete_account")
    assert_unavailable(
        verdict,
        "actions",
        "no call of 'delete_account' was seen",
        "the actions channel is partial",
        "response not seen completely",
    )
    assert_unavailable(capture.expect.max_tool_calls(0), "actions")
    assert_unavailable(capture.expect.only_tools(["lookup"]), "actions")
    assert_unavailable(capture.expect.tool_called("delete_account"), "actions")
    # What was seen still counts: the text before the cut was recorded.
    seen = capture.expect.final_text_contains("deleting your account")
    assert seen.status == "passed"
    not_seen = capture.expect.final_text_contains("goodbye")
    assert_unavailable(not_seen, "messages", "the recorded response was not seen whole")
    assert capture.expect.completed().status in ("failed", "unavailable")
    assert not capture.expect.completed()
    assert_unavailable(capture.expect.max_tokens(10_000), "usage")
    rolled = verdicts(capture.expect.tool_not_called("delete_account"), seen)
    assert rolled.status == "unavailable" and not rolled
    assert str(rolled).startswith("[UNAVAILABLE] verdicts\n       - unavailable: tool_not_called")
    optional = verdicts(capture.expect.tool_not_called("delete_account").optional(), seen)
    assert optional.status == "passed" and optional
    assert "- unavailable (optional): tool_not_called('delete_account')" in str(optional)


def test_a_tool_call_without_its_result(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    running.upstream.replies.append(
        chat_tool_json("gpt-5", name="refund", arguments='{"amount": 500}', call_id="c9")
    )
    openai_client(running).chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": "refund"}], tools=TOOLS
    )
    expect = Capture.load(stopped(running)).expect
    # Positive evidence passes whatever the coverage.
    assert expect.tool_called("refund", amount=500.0).status == "passed"
    assert expect.tool_call_count("refund", at_least=1)
    gap = expect.tool_not_called("delete_account")
    assert_unavailable(gap, "actions", "tool call refund (c9) got no result in a later request")
    assert_unavailable(expect.tool_call_count("refund", exactly=1), "actions")
    assert_unavailable(expect.no_tool_errors(), "actions", "got no result in a later request")
    # A contradiction fails it whatever the coverage.
    assert expect.tool_not_called("refund").status == "failed"
    assert expect.max_tool_calls(0).status == "failed"
    assert expect.tool_call_count("refund", at_most=0).status == "failed"


def test_a_refused_request(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    client = anthropic_client(running, "refused")
    running.upstream.replies.append(anthropic_text_json("claude-sonnet-4-5"))
    client.messages.create(
        model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            # An image part without its data cannot be audited: refused before forwarding.
            system=[{"type": "image", "source": {"type": "base64"}}],  # type: ignore[list-item]
        )
    expect = Capture.load(stopped(running)).expect
    completed = expect.completed()
    assert not completed
    assert "request refused" in str(completed)
    assert expect.model_used("claude-sonnet-4-5")
    assert expect.tool_not_called("delete_account")  # actions stay complete: no call was cut
    assert_unavailable(expect.that(lambda c: None, needs=["status"]), "status", "request refused")


@pytest.mark.parametrize("lost", [b"", b"{torn\n"], ids=["line gone", "line unreadable"])
def test_a_lost_audit_line_leaves_the_calls_of_its_response_unproven(
    recorded: tuple[Path, Path], tmp_path: Path, lost: bytes
) -> None:
    """The refund request's audit line is gone (or unreadable): its response event,
    which names the refund call, links to no turn. No turn shows the call, but the
    files do: absence is not proven, and a count is not known."""
    out, record = recorded
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    first, _refund, last = (out / "audit.jsonl").read_bytes().splitlines(keepends=True)
    (damaged / "audit.jsonl").write_bytes(first + lost + last)
    capture = Capture.load(damaged, record=record)
    expect = capture.expect
    assert not capture.tool_was_called("refund")  # the old trap, one more way
    why = "response event names seq 2, which has no audit record"
    assert_unavailable(expect.tool_not_called("refund"), "actions", why, "lines are all readable")
    assert_unavailable(expect.only_tools(["lookup"]), "actions", why)
    assert_unavailable(expect.max_tool_calls(1), "actions", why)
    assert_unavailable(expect.tool_call_count("refund", exactly=0), "actions", why)
    assert_unavailable(expect.tool_called("refund"), "actions", why)
    assert_unavailable(expect.tools_in_order(["lookup", "refund"]), "actions", why)
    assert_unavailable(expect.that(lambda c: None, needs=["actions"]), "actions", why)
    assert_unavailable(expect.that(lambda c: None, needs=["status"]), "status", why)
    # What the readable lines show still counts, either way.
    assert expect.tool_called("lookup").status == "passed"
    assert expect.tool_not_called("lookup").status == "failed"
    assert expect.final_text_contains("refunded").status == "passed"
    assert_unavailable(expect.final_text_contains("declined"), "messages", why)


def test_that_needs_messages_reads_the_recording(recorded: tuple[Path, Path]) -> None:
    out, record = recorded
    fine = Capture.load(out, record=record).expect.that(lambda c: None, needs=["messages"])
    assert fine.status == "passed", str(fine)
    gap = Capture.load(out).expect.that(lambda c: None, needs=["messages"])
    assert_unavailable(gap, "messages", "message content is not recorded", "--record RDIR")


def test_a_session_not_yet_ended_leaves_its_status_unproven(
    start_proxy: Callable[..., Running],
) -> None:
    running = start_proxy()
    refund_loop(running)
    expect = Capture.load(running.out).expect  # the proxy still runs: no sessions.jsonl line
    assert_unavailable(
        expect.that(lambda c: None, needs=["status"]), "status", "not ended", "refund-1"
    )
    assert_unavailable(expect.completed(), "status", "not ended (no sessions.jsonl line): refund-1")
    assert Capture.load(stopped(running)).expect.that(lambda c: None, needs=["status"])


def refund_then_500(running: Running, *, retried: bool) -> None:
    """A lookup call and its result, then the upstream answers HTTP 500 (and,
    when ``retried``, the SDK's retry gets the final answer)."""
    running.upstream.replies.extend(
        [
            chat_tool_json("gpt-5", name="lookup", arguments="{}", call_id="c1"),
            Reply(status=500, json={"error": {"message": "overloaded", "type": "server_error"}}),
        ]
    )
    if retried:
        running.upstream.replies.append(chat_text_json("gpt-5", text="Refunded."))
    client = openai_client(running).with_options(max_retries=1 if retried else 0)
    messages: list[Any] = [{"role": "user", "content": "refund"}]
    first = client.chat.completions.create(model="gpt-5", messages=messages, tools=TOOLS)
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": "c1", "content": "found"})
    if retried:
        client.chat.completions.create(model="gpt-5", messages=messages, tools=TOOLS)
    else:
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="gpt-5", messages=messages, tools=TOOLS)


@pytest.mark.parametrize("recording", [True, False])
def test_a_run_whose_last_request_failed_did_not_complete(
    start_proxy: Callable[..., Running], tmp_path: Path, recording: bool
) -> None:
    record = tmp_path / "record"
    running = start_proxy(**({"record": str(record)} if recording else {}))
    refund_then_500(running, retried=False)
    capture = Capture.load(stopped(running), record=record if recording else None)
    assert capture.sessions["refund-1"].stop_reason == "completed"  # the proxy's word
    for expect in (capture.expect, capture.sessions["refund-1"].expect):
        done = expect.completed()
        assert done.status == "failed", str(done)
        assert "last request (turn 2) was answered HTTP 500" in str(done)
        # The final answer is an error: no text to find, whether recorded or not.
        said = expect.final_text_contains("refunded")
        assert said.status == "failed", str(said)
        assert "the final response (turn 2) is an error answer (HTTP 500)" in str(said)


def test_a_failed_request_that_a_retry_answered_completed(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    record = tmp_path / "record"
    running = start_proxy(record=str(record))
    refund_then_500(running, retried=True)
    capture = Capture.load(stopped(running), record=record)
    assert [t.is_retry for t in capture.sessions["refund-1"].turns] == [False, False, True]
    assert capture.expect.completed().status == "passed"
    assert capture.expect.final_text_contains("refunded").status == "passed"


#: A tool name as a hostile or broken model could send it: a terminal escape
#: that clears the screen, a line break that forges a report line.
EVIL_NAME = "look\x1b[2Jup\n[PASS] forged\u202e"


def test_wire_text_never_reaches_a_terminal_raw(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    running.upstream.replies.append(
        chat_tool_json("gpt-5", name=EVIL_NAME, arguments="{}", call_id="c\x1b[31m")
    )
    openai_client(running).chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": "x"}], tools=TOOLS
    )
    expect = Capture.load(stopped(running)).expect
    made = [
        expect.tool_called("transfer"),
        expect.only_tools(["lookup"]),
        expect.tool_not_called("delete_account"),  # the unanswered call's reason names it
    ]
    for verdict in made:
        assert EVIL_NAME in (verdict.reason or ""), verdict.reason  # the JSON keeps it exact
        for text in (str(verdict), repr(verdict)):
            assert text.isprintable(), text
            assert "look\\x1b[2Jup\\n[PASS] forged\\u202e" in text
    rolled = str(verdicts(*made))
    assert all(line.isprintable() for line in rolled.splitlines()), rolled
    # One line per verdict that did not pass: a line break in a name forges none.
    assert len(rolled.splitlines()) == 1 + sum(not v.passed for v in made) + 2, rolled


@pytest.mark.parametrize(
    ("ask", "said"),
    [
        (lambda e: e.max_cost(math.nan), "max_cost() takes a finite number of US dollars"),
        (lambda e: e.max_cost(-1.0), "max_cost() takes a finite number of US dollars"),
        (lambda e: e.max_tool_calls(-1), "max_tool_calls() takes a whole number"),
        (lambda e: e.max_tokens(-1), "max_tokens() takes a whole number"),
        (lambda e: e.tool_call_count("x", at_least=3, at_most=2), "no count is at least 3"),
        (lambda e: e.tool_call_count("x", exactly=2, at_most=1), "no count is at least 2"),
    ],
)
def test_a_bound_that_cannot_mean_anything_is_refused(
    recorded: tuple[Path, Path], ask: Callable[[Any], Verdict], said: str
) -> None:
    """A NaN bound passes any cost (every comparison with NaN is false)."""
    out, _ = recorded
    with pytest.raises(ValueError, match=re.escape(said)):
        ask(Capture.load(out).expect)


def test_a_cut_attempt_that_was_retried_does_not_count_its_calls_twice(
    start_proxy: Callable[..., Running],
) -> None:
    """The stream carrying a lookup call is cut; the agent sends the same request
    again and gets the whole call. One call was made, sent twice: a count or a
    budget must not fail on the attempt the agent never received."""
    running = start_proxy()
    cut = chat_tool_sse("gpt-5")
    cut.cut_after = 3  # the call and part of its arguments, then the connection breaks
    running.upstream.replies.extend(
        [cut, chat_tool_sse("gpt-5"), chat_text_json("gpt-5", text="Sunny.")]
    )
    client = openai_client(running)
    messages: list[Any] = [{"role": "user", "content": "weather?"}]
    with pytest.raises((openai.APIConnectionError, httpx.HTTPError)):
        for _ in client.chat.completions.create(
            model="gpt-5", messages=messages, tools=TOOLS, stream=True
        ):
            pass
    calls: dict[int, Any] = {}
    for chunk in client.chat.completions.create(
        model="gpt-5", messages=messages, tools=TOOLS, stream=True
    ):
        for delta in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            calls.setdefault(delta.index, delta)
    (call,) = calls.values()
    messages.append(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    client.chat.completions.create(model="gpt-5", messages=messages, tools=TOOLS)
    capture = Capture.load(stopped(running))
    turns = capture.sessions["refund-1"].turns
    assert [t.is_retry for t in turns] == [False, True, False]
    assert [len(t.tool_calls) for t in turns] == [1, 1, 0]  # the cut attempt showed it too
    expect = capture.expect
    assert expect.max_tool_calls(1).status != "failed", str(expect.max_tool_calls(1))
    count = expect.tool_call_count("lookup", exactly=1)
    assert count.status != "failed", str(count)
    assert "1 call of 'lookup' seen (and 1 in an attempt the agent retried, not counted)" in str(
        count
    )
    # Presence sees every call: the cut one's arguments are not whole JSON, the retry's are.
    found = expect.tool_called("lookup", q="weather")
    assert found.status == "passed"
    assert found.details is not None and found.details[0]["matched_call_index"] == 1
    assert expect.tool_not_called("lookup").status == "failed"
    # The cut attempt's gap is still a gap: absence is not proven by the retry.
    assert_unavailable(expect.tool_not_called("delete_account"), "actions", "not seen completely")


def test_no_traffic_makes_every_verdict_unavailable(tmp_path: Path) -> None:
    (tmp_path / "sessions.jsonl").write_text("")
    expect = Capture.load(tmp_path).expect
    for verdict in (
        expect.tool_not_called("x"),
        expect.tool_called("x"),
        expect.model_used("gpt-5"),
        expect.only_models(["gpt-5"]),
        expect.max_tokens(1),
        expect.max_cost(1.0),
        expect.completed(),
        expect.final_text_contains("x"),
        expect.instructions_unchanged(),
    ):
        assert verdict.status == "unavailable", str(verdict)
        assert "No outbound model requests captured" in str(verdict)


def test_max_cost_of_a_model_nobody_can_price(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    running.upstream.replies.append(chat_text_json("house-model-7"))
    openai_client(running).chat.completions.create(
        model="house-model-7", messages=[{"role": "user", "content": "hi"}]
    )
    verdict = Capture.load(stopped(running)).expect.max_cost(1.0)
    assert_unavailable(verdict, "usage", "could not be priced", "'house-model-7'")


def test_instructions_that_change_fail_naming_the_turn(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    client = openai_client(running)
    for system in ("Be brief.", "Be brief. Today is Monday."):
        running.upstream.replies.append(chat_text_json("gpt-5"))
        client.chat.completions.create(
            model="gpt-5",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        )
    verdict = Capture.load(stopped(running)).expect.instructions_unchanged()
    assert verdict.status == "failed"
    assert verdict.reason == (
        "the instructions of turn 2 differ from those of turn 1 (part 1 of 1 changed)"
    )


def test_every_verdict_made_is_seen_by_a_watcher(recorded: tuple[Path, Path]) -> None:
    out, _ = recorded
    with watch_verdicts() as made:
        expect = Capture.load(out).expect
        first = expect.final_text_contains("x")
        optional = first.optional()
    assert made == [first, optional]
    assert optional.key == first.key


def test_verdict_json(recorded: tuple[Path, Path]) -> None:
    out, _ = recorded
    verdict = Capture.load(out).expect.final_text_contains("refunded")
    data = verdict.to_dict()
    assert data["status"] == "unavailable" and data["channel"] == "messages"
    assert data["scope"] == "the capture" and data["optional"] is False
    assert "message content is not recorded" in data["reason"]
    assert "--record" in data["hint"]


# --------------------------------------------------------------------------
# Tool errors: judged where the wire flags them


@pytest.mark.parametrize("failed", [False, True])
def test_no_tool_errors_reads_anthropic_is_error(
    start_proxy: Callable[..., Running], failed: bool
) -> None:
    running = start_proxy()
    client = anthropic_client(running, "tools")
    running.upstream.replies.extend(
        [anthropic_tool_json("claude-sonnet-4-5"), anthropic_text_json("claude-sonnet-4-5")]
    )
    first = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "look it up"}],
        tools=ANTHROPIC_TOOLS,
    )
    call = next(block for block in first.content if block.type == "tool_use")
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": "boom"}
    if failed:
        result["is_error"] = True
    client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[
            {"role": "user", "content": "look it up"},
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {"role": "user", "content": [result]},
        ],
        tools=ANTHROPIC_TOOLS,
    )
    capture = Capture.load(stopped(running))
    assert capture.records[1].tool_results[0].is_error is failed
    (invocation,) = capture.sessions["tools"].tool_invocations
    assert invocation.result_is_error is failed
    verdict = capture.expect.no_tool_errors()
    if failed:
        assert verdict.status == "failed"
        assert verdict.reason == (
            "1 tool result came back marked an error: toolu_lookup1 (sent back in turn 2)"
        )
    else:
        assert verdict.status == "passed", str(verdict)
        assert verdict.reason == "no error flag set on 1 tool result"
