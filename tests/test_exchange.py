"""The HTTP exchange core alone: request heads, bodies and responses in as plain
values, audit lines, events and notices out. No proxy, no mitmproxy."""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import replace
from typing import Any

import orjson
import pytest

from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.core.body_audit import (
    HASH_IN_THREAD_BYTES,
    Decode,
    Digest,
    Failed,
    Hashed,
    Reencode,
    Reencoded,
    RequestBody,
)
from modeltap.core.exchange import Exchange, State
from modeltap.core.gate import RequestHead
from modeltap.core.notices import Forward, Listener, Outcome, Reply
from modeltap.core.observe import StreamTap
from modeltap.rules.routing import RouteTable
from tests.conftest import Core
from tests.upstream import chat_text_json, chat_text_sse, sse_bytes

MS = 1_000_000
CHAT = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]})
STREAM = orjson.dumps(
    {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "stream": True}
)


def head(
    target: str = "/openai/v1/chat/completions",
    method: str = "POST",
    session: str | None = "s1",
    **headers: str,
) -> RequestHead:
    fields = tuple((k.encode(), v.encode()) for k, v in headers.items())
    return RequestHead(
        id="flow-1",
        method=method,
        target=target,
        scheme="http",
        host="127.0.0.1",
        port=8787,
        headers=headers,
        fields=fields,
        session=session,
    )


def audited(core: Core, body: bytes = CHAT, t: int = 10 * MS) -> Exchange:
    """An exchange opened at 0, audited and forwarded at ``t``."""
    ex = Exchange.open(core.run, head(), 0)
    assert ex.reply is None and ex.api == API_CHAT
    assert isinstance(ex.receive_body(RequestBody(body, {}), t), Forward)
    return ex


def outcomes(core: Core) -> list[Outcome]:
    return [args[0] for args in core.heard.args("finished")]


# ---------------------------------------------------------------- the request head


def test_a_model_request_is_routed_and_started(core: Core) -> None:
    ex = Exchange.open(core.run, head(traceparent="00-ab-cd-01"), 5)
    assert (ex.session_id, ex.request_id, ex.api, ex.path) == (
        "s1",
        "flow-1",
        API_CHAT,
        "/v1/chat/completions",
    )
    assert ex.route is not None and ex.route.name == "openai" and ex.rerouted
    assert (ex.upstream, ex.host) == ("https://api.openai.com", "api.openai.com")
    ((view, t),) = core.heard.args("started")
    assert (view.id, view.traceparent, view.record, t) == ("flow-1", "00-ab-cd-01", None, 5)
    assert core.audit() == [] and core.events() == []


def test_ids_come_from_the_headers_else_the_session_option_else_the_run(core: Core) -> None:
    ex = Exchange.open(core.run, head(session=None, **{"x-request-id": "r9"}), 0)
    assert (ex.session_id, ex.request_id) == ("run-1", "r9")
    core.run.settings = replace(core.run.settings, session="named")
    ex = Exchange.open(core.run, head(session=None, **{"x-client-request-id": "c1"}), 0)
    assert (ex.session_id, ex.request_id) == ("named", "c1")
    # A WebSocket handshake is a session of its own, named by x-client-request-id only.
    ws = head(
        "/openai/v1/responses",
        "GET",
        None,
        upgrade="websocket",
        **{"sec-websocket-version": "13", "x-request-id": "r"},
    )
    ex = Exchange.open(core.run, ws, 0)
    assert (ex.websocket, ex.api, ex.session_id, ex.request_id) == (True, None, "flow-1", "flow-1")


@pytest.mark.parametrize(
    ("request_head", "rule", "status"),
    [
        (head(session="x" * 300), "value_too_long", 400),
        (head("/__modeltap/sessions/s1/end"), "control_not_on_proxy_port", 403),
        (head("/openai/v1/chat/../completions"), "noncanonical_path", 400),
        (head(**{"content-length": str(65 * 1024 * 1024)}), "body_too_large", 413),
        (head("/openai/v1/chat/completions", "PUT", **{"x-http-method": "POST"}),
         "method_override", 400),
    ],
)  # fmt: skip
def test_refusals_of_the_head(
    core: Core, request_head: RequestHead, rule: str, status: int
) -> None:
    ex = Exchange.open(core.run, request_head, 7)
    assert ex.reply is not None and ex.reply.status == status
    assert f"[rule {rule}]" in orjson.loads(ex.reply.body)["error"]["message"]
    (event,) = core.events("rejected")
    assert (event["rule"], event["status"], event["transport"]) == (rule, status, "http")
    (outcome,) = outcomes(core)
    assert outcome.rejected is not None and outcome.rejected.rule == rule
    assert (outcome.status, outcome.end_ns) == (status, 7)
    assert core.run.counts["refused"] == 1 and core.audit() == []


def test_an_overlong_id_is_refused_under_ids_of_our_own(core: Core) -> None:
    # Filed under the default session and the proxy's own id, never the header's.
    Exchange.open(core.run, head(**{"x-client-request-id": "p" * 300}), 0)
    Exchange.open(core.run, head(session="q" * 300), 0)
    assert [(e["session_id"], e["request_id"]) for e in core.events("rejected")] == [
        ("run-1", "flow-1"),
        ("run-1", "flow-1"),
    ]


def test_no_route_is_a_404_logged_as_unaudited(core: Core) -> None:
    core.run.settings = replace(core.run.settings, routes=RouteTable.build(["a=http://x"], None))
    core.run.settings = replace(
        core.run.settings,
        routes=RouteTable([r for r in core.run.settings.routes.routes if r.name == "a"]),
    )
    ex = Exchange.open(core.run, head("/elsewhere?key=sk-1"), 0)
    assert ex.reply is not None and ex.reply.status == 404
    assert orjson.loads(ex.reply.body)["error"]["code"] == "modeltap_no_route"
    (event,) = core.events("unaudited")
    assert (event["status"], event["path"], event["host"]) == (
        404,
        "/elsewhere?key=REDACTED",
        "127.0.0.1",
    )


def test_regular_mode_refuses_the_control_listener_as_a_target(core: Core) -> None:
    core.run.settings = replace(core.run.settings, mode="regular")
    core.run.control_address = ("127.0.0.1", 8787)
    ex = Exchange.open(core.run, head("/anything"), 0)
    assert ex.reply is not None and ex.reply.status == 403 and not ex.rerouted
    core.run.control_address = ("127.0.0.1", 1)
    ex = Exchange.open(core.run, head("/anything"), 0)
    assert ex.reply is None and ex.route is None and not ex.rerouted  # passed through


def test_a_session_ended_by_the_harness_takes_no_more_requests(core: Core) -> None:
    audited(core)
    assert core.run.end_session("s1") is not None
    ex = Exchange.open(core.run, head(), 0)
    assert ex.reply is not None
    assert core.events("rejected")[0]["rule"] == "session_ended"


# ---------------------------------------------------------------- the body


def test_forwarding_writes_the_audit_line_first(core: Core) -> None:
    ex = audited(core, t=10 * MS)
    (record,) = core.audit()
    assert (record["seq"], record["session_id"], record["route"], record["body_bytes"]) == (
        1,
        "s1",
        "openai",
        len(CHAT),
    )
    assert ex.view.record is not None and ex.view.turn == 1
    assert core.heard.names() == ["started", "audited", "forwarding"]
    (view, facts, body, t) = core.heard.args("audited")[0]
    assert (view.record.seq, facts.model, body, t) == (1, "gpt-5", CHAT, 10 * MS)


def test_a_forwarding_listener_tags_or_answers(core: Core) -> None:
    core.heard.answers["forwarding"] = Forward((("x-tag", "1"),))
    ex = Exchange.open(core.run, head(), 0)
    assert ex.receive_body(RequestBody(CHAT, {}), 1) == Forward((("x-tag", "1"),))
    core.heard.answers["forwarding"] = Reply(400, b"{}")
    ex = Exchange.open(core.run, head(), 0)
    assert ex.receive_body(RequestBody(CHAT, {}), 1) == Reply(400, b"{}")
    # The audit line was written all the same: the answer replaces the upstream's.
    assert len(core.audit()) == 2


def test_the_match_and_the_parsed_body_are_kept_on_the_view(core: Core) -> None:
    audited(core)
    ((view, _, body, _),) = core.heard.args("audited")
    assert view.endpoint is not None and view.endpoint.api == API_CHAT
    assert view.body == orjson.loads(CHAT) and view.parsed_body(body) is view.body
    # A body whose large payloads the audit never read is parsed whole by who needs it.
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 65536}}
    big = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": [image]}]})
    ex = Exchange.open(core.run, head(), 0)
    assert isinstance(ex.receive_body(RequestBody(big, {}), 1), Forward)
    view = core.heard.args("audited")[1][0]
    assert view.body is None and view.parsed_body(big) == orjson.loads(big)


def test_a_compressed_body_is_decoded_off_the_loop_then_audited(core: Core) -> None:
    packed = gzip.compress(CHAT)
    ex = Exchange.open(core.run, head(), 0)
    work = ex.receive_body(RequestBody(packed, {"content-encoding": "gzip"}), 1)
    assert isinstance(work, Decode) and work.codings == ("gzip",)
    assert core.audit() == []  # nothing is written before the audit is done
    assert isinstance(ex.resume(work.run(), 2), Forward)
    (record,) = core.audit()
    assert (record["body_bytes"], record["body_sha256"]) == (
        len(packed),
        hashlib.sha256(packed).hexdigest(),
    )
    (_, facts, body, t) = core.heard.args("audited")[0]
    assert (facts.model, body, t) == ("gpt-5", CHAT, 2)  # listeners get it decoded


def test_decoding_stops_at_max_body(core: Core) -> None:
    body = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi " * 999}]})
    core.run.settings = replace(core.run.settings, max_body=len(body) - 1)
    ex = Exchange.open(core.run, head(), 0)
    work = ex.receive_body(RequestBody(gzip.compress(body), {"content-encoding": "gzip"}), 1)
    assert isinstance(work, Decode)
    reply = ex.resume(work.run(), 2)
    assert isinstance(reply, Reply) and reply.status == 413
    assert [e["rule"] for e in core.events("rejected")] == ["body_too_large"]
    # A body larger than --max-body as received is refused at once.
    ex = Exchange.open(core.run, head(), 0)
    reply = ex.receive_body(RequestBody(body, {}), 3)
    assert isinstance(reply, Reply) and reply.status == 413
    assert core.audit() == []


def test_a_large_body_is_hashed_off_the_loop_or_by_its_arrival(core: Core) -> None:
    body = orjson.dumps({"model": "gpt-5", "messages": [], "x": "y" * HASH_IN_THREAD_BYTES})
    ex = Exchange.open(core.run, head(), 0)
    assert ex.hash_as_it_arrives(str(len(body))) and not ex.hash_as_it_arrives("")
    work = ex.receive_body(RequestBody(body, {}), 1)
    assert isinstance(work, Digest) and not work.from_arrival and work.raw is body
    assert isinstance(ex.resume(work.run(), 2), Forward)
    # Hashed while it arrived: the glue hands in that digest.
    ex = Exchange.open(core.run, head(), 0)
    work = ex.receive_body(RequestBody(body, {}, hashed_as_it_arrived=True), 3)
    assert isinstance(work, Digest) and work.from_arrival
    assert isinstance(ex.resume(Hashed("ab" * 32), 4), Forward)
    assert [r["body_sha256"] for r in core.audit()] == [hashlib.sha256(body).hexdigest(), "ab" * 32]


def test_image_detail_forwards_and_audits_the_rewritten_body(core: Core) -> None:
    core.run.settings = replace(core.run.settings, image_detail="low")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [image]}]})
    ex = Exchange.open(core.run, head(), 0)
    work = ex.receive_body(RequestBody(body, {}), 1)
    assert isinstance(work, Reencode)
    assert orjson.loads(work.content)["messages"][0]["content"][0]["image_url"]["detail"] == "low"
    sent = b"the rewritten body, encoded as the client sent it"
    assert isinstance(ex.resume(Reencoded(sent), 2), Forward)
    (record,) = core.audit()
    assert (record["body_bytes"], record["body_sha256"], record["image_details"]) == (
        len(sent),
        hashlib.sha256(sent).hexdigest(),
        ["low"],
    )
    assert core.heard.args("audited")[0][2] == work.content


def test_the_body_audit_fails_closed(core: Core) -> None:
    ex = Exchange.open(core.run, head(), 0)
    work = ex.receive_body(RequestBody(gzip.compress(CHAT), {"content-encoding": "gzip"}), 1)
    assert isinstance(work, Decode)
    # A result it did not ask for is a bug: refused, never forwarded.
    reply = ex.resume(Hashed("ab" * 32), 2)
    assert isinstance(reply, Reply) and b"audit_internal_error" in reply.body
    # So is work the glue could not do.
    ex = Exchange.open(core.run, head(), 0)
    assert isinstance(
        ex.receive_body(RequestBody(gzip.compress(CHAT), {"content-encoding": "gzip"}), 3), Decode
    )
    reply = ex.resume(Failed(RuntimeError("the executor is gone")), 4)
    assert isinstance(reply, Reply) and reply.status == 500
    assert b"audit_internal_error" in reply.body
    assert [e["rule"] for e in core.events("rejected")] == ["audit_internal_error"] * 2
    assert core.audit() == []


def test_the_last_gate_refuses_by_session_policy(core: Core) -> None:
    core.run.settings = replace(core.run.settings, fail_closed=True)
    Exchange.open(core.run, head("/openai/v1/chat/../x"), 0)  # a refusal in s1
    ex = Exchange.open(core.run, head(), 0)
    reply = ex.receive_body(RequestBody(CHAT, {}), 1)
    assert isinstance(reply, Reply) and reply.status == 400
    assert [e["rule"] for e in core.events("rejected")] == ["noncanonical_path", "fail_closed"]
    assert core.audit() == [] and not ex.audited


def test_strict_refuses_what_it_cannot_audit_but_lets_models_listing_pass(core: Core) -> None:
    core.run.settings = replace(core.run.settings, strict=True)
    ex = Exchange.open(core.run, head("/openai/v1/models", "GET"), 0)
    assert isinstance(ex.pass_through(lambda: b"", {}), Forward)
    ex = Exchange.open(core.run, head("/openai/v1/files", "POST"), 0)
    reply = ex.pass_through(lambda: b"", {})
    assert isinstance(reply, Reply) and b"strict_unaudited" in reply.body


def test_a_pass_through_reads_its_body_only_for_a_forwarding_listener(core: Core) -> None:
    read: list[bool] = []

    def body() -> bytes:
        read.append(True)
        return b"data"

    ex = Exchange.open(core.run, head("/openai/v1/files"), 0)
    ex.pass_through(body, {"content-type": "text/plain"})
    ((view, data, headers),) = core.heard.args("forwarding")
    assert (view.record, data, headers, read) == (
        None,
        b"data",
        {"content-type": "text/plain"},
        [True],
    )
    core.run.listeners.unsubscribe(core.heard)
    Exchange.open(core.run, head("/openai/v1/files"), 0).pass_through(body, {})
    assert read == [True]


# ---------------------------------------------------------------- the response


def test_a_json_response_ends_with_its_response_event(core: Core) -> None:
    ex = audited(core, t=10 * MS)
    body = orjson.dumps(chat_text_json("gpt-5-2025").json)
    headers = {"content-type": "application/json"}
    assert ex.started(200, headers, 40 * MS) is None  # read whole
    ex.ended(200, body, None, None, 50 * MS)
    (event,) = core.events("response")
    assert (event["seq"], event["status"], event["model"], event["stream"]) == (
        1,
        200,
        "gpt-5-2025",
        False,
    )
    assert (event["ttfb_ms"], event["ttft_ms"], event["duration_ms"]) == (30.0, None, 40.0)
    assert event["usage"]["input_tokens"] == 21 and event["evidence_complete"]
    (outcome,) = outcomes(core)
    assert outcome.response is not None and outcome.body == body and outcome.content == body
    assert core.run.in_flight == {}


def test_a_stream_is_observed_as_it_passes(core: Core) -> None:
    ex = audited(core, STREAM, t=0)
    tap = ex.started(200, {"content-type": "text/event-stream"}, 1 * MS)
    assert isinstance(tap, StreamTap)
    reply = chat_text_sse("gpt-5")
    assert reply.sse is not None
    wire = b"".join(sse_bytes(name, data) for name, data in reply.sse)
    for piece in (wire[:7], wire[7:100], wire[100:]):
        assert tap(piece) is piece  # every byte goes on unchanged
    assert tap(b"") == b""
    ex.ended(200, None, None, None, 9 * MS)
    (event,) = core.events("response")
    assert (event["stream"], event["finish_reasons"], event["evidence_complete"]) == (
        True,
        ["stop"],
        True,
    )
    assert event["ttft_ms"] is not None and "first_chunk" in core.heard.names()
    assert "chunk" in core.heard.names()  # a chunk listener hears the bytes too


def test_an_undecodable_stream_is_passed_on_and_noted(core: Core) -> None:
    ex = audited(core, STREAM, t=0)
    core.run.listeners.unsubscribe(core.heard)
    tap = ex.started(200, {"content-type": "text/event-stream", "content-encoding": "gzip"}, 1)
    assert isinstance(tap, StreamTap)
    assert tap(b"not gzip at all") == b"not gzip at all"
    ex.ended(200, None, None, None, 2)
    (event,) = core.events("response")
    assert not event["evidence_complete"] and event["capture_errors"]


def test_a_pass_through_response_is_logged_as_unaudited(core: Core) -> None:
    ex = Exchange.open(core.run, head("/openai/v1/models", "GET"), 0)
    ex.pass_through(lambda: b"", {})
    assert ex.started(200, {"content-type": "text/event-stream"}, 1) is not None
    ex.ended(200, None, None, None, 2)
    (event,) = core.events("unaudited")
    assert (event["method"], event["path"], event["status"], event["host"]) == (
        "GET",
        "/v1/models",
        200,
        "api.openai.com",
    )
    (outcome,) = outcomes(core)
    assert outcome.unaudited is not None and outcome.streamed


# ---------------------------------------------------------------- failures


def test_an_upstream_failure_before_the_answer(core: Core) -> None:
    ex = audited(core)
    assert ex.failed("upstream_unreachable", None, 20 * MS, request_complete=True) is None
    (error,) = core.events("error")
    assert (error["error"], error["seq"], error["method"]) == ("upstream_unreachable", 1, "POST")
    (response,) = core.events("response")
    assert response["status"] is None and not response["evidence_complete"]
    assert response["capture_errors"][0].startswith("upstream_unreachable: ")
    (outcome,) = outcomes(core)
    assert outcome.error is not None and outcome.failure == "upstream_unreachable"


def test_a_timeout_answers_in_the_providers_shape(core: Core) -> None:
    ex = audited(core)
    reply = ex.failed("upstream_timeout", "first_byte", 1, request_complete=True)
    assert reply is not None and (reply.status, reply.close) == (504, True)
    assert orjson.loads(reply.body)["error"]["code"] == "modeltap_upstream_timeout"
    assert "first-byte" in core.events("error")[0]["message"]


def test_a_body_cut_by_the_idle_limit_is_a_timeout(core: Core) -> None:
    ex = audited(core)
    ex.started(200, {}, 1)
    ex.ended(200, b'{"partial', None, "idle", 2)
    assert core.events("error")[0]["error"] == "upstream_timeout"
    assert core.events("response")[0]["status"] == 200


def test_a_client_leaving_after_the_last_event_is_a_whole_response(core: Core) -> None:
    ex = audited(core, STREAM, t=0)
    tap = ex.started(200, {"content-type": "text/event-stream"}, 1)
    reply = chat_text_sse("gpt-5")
    assert isinstance(tap, StreamTap) and reply.sse is not None
    tap(b"".join(sse_bytes(name, data) for name, data in reply.sse))
    assert ex.failed("client_gone", None, 2, request_complete=True) is None
    assert core.events("error") == []
    assert core.events("response")[0]["evidence_complete"]
    assert outcomes(core)[0].failure == "client_gone"  # the recording keeps the break


def test_a_pass_through_that_breaks_gets_both_lines(core: Core) -> None:
    ex = Exchange.open(core.run, head("/openai/v1/models", "GET"), 0)
    ex.pass_through(lambda: b"", {})
    ex.failed("upstream_reset", None, 1, request_complete=True)
    assert [e["kind"] for e in core.events()] == ["unaudited", "error"]
    (outcome,) = outcomes(core)
    assert outcome.unaudited is not None and outcome.error is not None


def test_after_an_answer_or_the_end_nothing_more_is_written(core: Core) -> None:
    ex = Exchange.open(core.run, head("/__modeltap/"), 0)
    ex.ended(200, b"{}", None, None, 1)
    ex.failed("client_gone", None, 1, request_complete=True)
    assert [e["kind"] for e in core.events()] == ["rejected"]


def test_each_step_moves_the_state_and_a_late_one_changes_nothing(core: Core) -> None:
    ex = Exchange.open(core.run, head(), 0)
    assert ex.state is State.OPEN
    assert isinstance(ex.receive_body(RequestBody(STREAM, {}), 1), Forward)
    assert ex.state is State.FORWARDED
    assert isinstance(ex.started(200, {"content-type": "text/event-stream"}, 2), StreamTap)
    assert ex.state is State.RESPONDING
    assert ex.started(200, {}, 3) is None  # one response head
    ex.ended(200, None, None, None, 4)
    assert ex.state is State.DONE
    ex.ended(200, None, None, None, 5)
    assert ex.failed("upstream_reset", None, 6, request_complete=True) is None
    ex.stop(7)
    assert [e["kind"] for e in core.events()] == ["response"]
    # The body of an answered request is never audited, nor forwarded.
    ex = Exchange.open(core.run, head("/openai/v1/chat/../completions"), 0)
    assert ex.state is State.ANSWERED
    reply = ex.receive_body(RequestBody(CHAT, {}), 1)
    assert isinstance(reply, Reply) and len(core.audit()) == 1
    assert [e["kind"] for e in core.events()] == ["response", "rejected"]  # written once


def test_a_switch_is_refused_even_after_the_exchange_ended(core: Core) -> None:
    ex = audited(core)
    assert ex.started(101, {}, 1) is None
    core.run.stop(2)  # the audited exchange ends (proxy_stopped) before the 101 is handled
    reply = ex.switched(False, 3)
    assert reply is not None and reply.close and b"unsupported_upgrade" in reply.body
    assert [e["kind"] for e in core.events()] == ["error", "response"]  # nothing more


# ---------------------------------------------------------------- stopping


def test_stop_ends_what_is_in_flight_then_the_sessions(core: Core) -> None:
    audited(core)
    core.run.stop(99)
    assert [e["kind"] for e in core.events()] == ["error", "response"]
    assert core.events("error")[0]["error"] == "proxy_stopped"
    (status,) = core.sessions()
    assert (status["session_id"], status["stop_reason"]) == ("s1", "proxy_stopped")
    assert core.heard.names()[-2:] == ["session_ended", "stopped"]
    # After stop: refused with a 503, nothing written.
    ex = Exchange.open(core.run, head(), 100)
    assert ex.reply is not None and (ex.reply.status, ex.reply.close) == (503, True)
    assert len(core.events()) == 2
    last = outcomes(core)[-1].rejected
    assert last is not None and last.rule == "proxy_stopped"


def test_a_listener_that_raises_never_stops_the_exchange(core: Core) -> None:
    class Raises(Listener):
        def audited(self, *args: Any) -> None:
            raise RuntimeError("listener bug")

    core.run.listeners.subscribe(Raises())
    audited(core)
    assert len(core.audit()) == 1 and "forwarding" in core.heard.names()
