"""Observing responses alone: whole bodies, and streams as they pass."""

from __future__ import annotations

import gzip

import orjson

from modeltap import apis
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.core.body_audit import audit_body
from modeltap.core.observe import StreamTap, observe_body, stream_framing
from tests.upstream import chat_text_json, chat_text_sse, sse_bytes

FACTS, _ = audit_body(API_CHAT, b'{"model": "gpt-5", "messages": []}', None)
REPLY = chat_text_sse("gpt-5")
assert REPLY.sse is not None
WIRE = b"".join(sse_bytes(name, data) for name, data in REPLY.sse)


def test_a_whole_body_decoded_and_observed() -> None:
    raw = gzip.compress(orjson.dumps(chat_text_json("gpt-5").json))
    facts, data = observe_body(API_CHAT, FACTS, raw, "gzip")
    assert (facts.model, facts.evidence_complete) == ("gpt-5", True)
    assert data == gzip.decompress(raw)
    facts, data = observe_body(API_CHAT, FACTS, b"<html>", None)
    assert (facts.evidence_complete, data) == (False, None)
    assert facts.capture_errors == ("the response body is not valid JSON",)


def test_an_error_answer_in_another_shape_is_said_to_be_one() -> None:
    """An HTML 502 page, or another API's 404: what the status says, not a
    malformed success; the API's own error body stays complete."""
    html, _ = observe_body(API_CHAT, FACTS, b"<html>bad gateway</html>", None, 502)
    assert (html.status, html.evidence_complete) == ("error", False)
    assert html.capture_errors == ("the upstream answered HTTP 502, not in this API's error shape",)
    fastapi_404 = orjson.dumps({"detail": "Not Found"})  # a server with no such path
    foreign, _ = observe_body(API_CHAT, FACTS, fastapi_404, None, 404)
    assert foreign.capture_errors == (
        "the upstream answered HTTP 404, not in this API's error shape: it refused the path "
        "(wrong base URL, or another API's route?)",
    )
    own = orjson.dumps({"error": {"message": "no", "type": "invalid_request_error"}})
    facts, _ = observe_body(API_CHAT, FACTS, own, None, 404)
    assert (facts.status, facts.evidence_complete, facts.capture_errors) == ("error", True, ())


def test_a_stream_passes_unchanged_and_is_observed() -> None:
    firsts: list[int] = []
    chunks: list[bytes] = []
    tap = StreamTap.observing(
        API_CHAT,
        FACTS,
        "",
        on_first_chunk=firsts.append,
        on_chunk=lambda data, t: chunks.append(data),
    )
    pieces = [WIRE[i : i + 50] for i in range(0, len(WIRE), 50)]
    assert [tap(p) for p in pieces] == pieces
    assert tap(b"") == b""
    assert b"".join(chunks) == WIRE and len(firsts) == 1 and tap.first_chunk_ns == firsts[0]
    assert tap.done
    facts = tap.finish()
    assert (facts.finish_reasons, facts.evidence_complete) == (("stop",), True)


def test_an_undecodable_stream_is_passed_on_and_named() -> None:
    tap = StreamTap.observing(API_CHAT, FACTS, "gzip")
    assert tap(b"not gzip") == b"not gzip" and not tap.done
    facts = tap.finish()
    assert not facts.evidence_complete and facts.capture_errors
    unknown = StreamTap.observing(API_CHAT, FACTS, "compress")
    assert unknown.observer is None and unknown(b"x") == b"x"
    assert unknown.finish().capture_errors != ("the stream could not be observed",)
    assert unknown.finish("upstream_reset: gone").capture_errors == ("upstream_reset: gone",)


def test_a_cut_stream_says_why() -> None:
    tap = StreamTap.observing(API_CHAT, FACTS, "")
    tap(WIRE[:80])
    facts = tap.finish("upstream_reset: the upstream connection broke")
    assert not facts.evidence_complete
    assert any("upstream_reset" in e for e in facts.capture_errors)


def test_stream_framing_sse_always_json_array_only_for_a_gemini_stream() -> None:
    gemini = "gemini.generate_content"
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    streamed, _ = audit_body(gemini, b'{"contents": []}', None, apis.match_endpoint(path))
    unary = apis.match_endpoint(path.replace("streamG", "g"))
    whole, _ = audit_body(gemini, b'{"contents": []}', None, unary)
    assert stream_framing("Text/Event-Stream; charset=utf-8", None, None, 200) == "sse"
    assert stream_framing("text/event-stream", API_CHAT, FACTS, 200) == "sse"
    assert stream_framing("application/json; charset=UTF-8", gemini, streamed, 200) == "json_array"
    # An error answers a streamed request with one object; a whole request, one response.
    assert stream_framing("application/json", gemini, streamed, 429) is None
    assert stream_framing("application/json", gemini, whole, 200) is None
    # Other APIs never stream a JSON array, and unaudited requests are not read.
    assert stream_framing("application/json", API_CHAT, FACTS, 200) is None
    assert stream_framing("application/json", gemini, None, 200) is None
