"""The body's audit alone: codings, the parse, the audit, and the work it asks
for (decode, re-encode, hash) before it is done. The exchange's use of it is
in tests/test_exchange.py, the glue doing the work in tests/addons/test_http.py."""

from __future__ import annotations

import gzip
import hashlib

import orjson
import pytest

from modeltap import apis
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.core.body_audit import (
    HASH_IN_THREAD_BYTES,
    Audited,
    BodyAudit,
    Decode,
    Decoded,
    Digest,
    Failed,
    Hashed,
    Reencode,
    Reencoded,
    RequestBody,
    audit_body,
    body_codings,
    model_reader,
    parse_body,
)
from modeltap.evidence.records import RequestFacts
from modeltap.rules.errors import Rejected

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
CHAT_IMAGE = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [IMAGE]}]})


def audit(image_detail: str | None = None, *, signed: bool = False) -> BodyAudit[RequestFacts]:
    endpoint = apis.match_endpoint("/v1/chat/completions")
    read = model_reader(API_CHAT, endpoint, signed=signed, image_detail=image_detail)
    return BodyAudit(read, max_body=1 << 20)


def test_body_codings() -> None:
    assert body_codings(10, None, "gzip", 100) == ("gzip",)
    assert body_codings(10, "chunked", None, 100) == ()
    for args, rule in (
        ((101, None, None, 100), "body_too_large"),
        ((10, "gzip, chunked", None, 100), "undecodable_content_encoding"),
        ((10, None, "compress", 100), "undecodable_content_encoding"),
    ):
        with pytest.raises(Rejected) as e:
            body_codings(*args)  # type: ignore[arg-type]
        assert e.value.rule == rule


def test_audit_body_rewrites_images_only_when_asked() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [image]}]})
    facts, rewritten = audit_body(API_CHAT, body, None)
    assert (facts.model, facts.image_details, rewritten) == ("m", (None,), None)
    facts, rewritten = audit_body(API_CHAT, body, "low")
    assert facts.image_details == ("low",) and rewritten is not None
    assert orjson.loads(rewritten)["messages"][0]["content"][0]["image_url"]["detail"] == "low"
    with pytest.raises(Rejected, match="missing_model"):
        audit_body(API_CHAT, b"{}", None)


def test_parse_body_names_the_real_fault_behind_an_elided_parse() -> None:
    with pytest.raises(Rejected, match="duplicate_key"):
        parse_body(b'{"a": 1, "a": 2}', elide=True)
    assert parse_body(b'{"a": 1}', elide=True) == ({"a": 1}, True)


def test_a_plain_small_body_is_audited_at_once() -> None:
    done = audit().start(RequestBody(CHAT_IMAGE, {}))
    assert isinstance(done, Audited)
    assert (done.facts.model, done.sent, done.size, done.sha256) == (
        "m",
        CHAT_IMAGE,
        len(CHAT_IMAGE),
        hashlib.sha256(CHAT_IMAGE).hexdigest(),
    )


def test_a_compressed_rewritten_large_body_asks_for_each_step_in_turn() -> None:
    body = audit("high")
    packed = gzip.compress(CHAT_IMAGE)
    work = body.start(RequestBody(packed, {"content-encoding": "gzip"}))
    assert isinstance(work, Decode) and work.raw is packed
    decoded = work.run()
    assert decoded == Decoded(CHAT_IMAGE)
    work = body.resume(decoded)
    assert isinstance(work, Reencode)
    assert orjson.loads(work.content)["messages"][0]["content"][0]["image_url"]["detail"] == "high"
    sent = b"x" * HASH_IN_THREAD_BYTES  # the glue's re-encoding, large: hashed off the loop
    digest = body.resume(Reencoded(sent))
    assert isinstance(digest, Digest) and digest.raw is sent and not digest.from_arrival
    assert digest.run() == Hashed(hashlib.sha256(sent).hexdigest())
    done = body.resume(Hashed("ab" * 32))
    assert isinstance(done, Audited)
    assert (done.sent, done.size, done.sha256) == (work.content, len(sent), "ab" * 32)


@pytest.mark.parametrize(
    ("raw", "headers", "rule"),
    [
        (b"not gzip", {"content-encoding": "gzip"}, "undecodable_content_encoding"),
        (gzip.compress(b"x" * (2 << 20)), {"content-encoding": "gzip"}, "body_too_large"),
    ],
)
def test_a_body_that_does_not_decode_is_refused(
    raw: bytes, headers: dict[str, str], rule: str
) -> None:
    body = audit()
    work = body.start(RequestBody(raw, headers))
    assert isinstance(work, Decode)
    decoded = work.run()  # never raises: the refusal is its result
    assert isinstance(decoded.content, Rejected) and decoded.content.rule == rule
    refused = body.resume(decoded)
    assert isinstance(refused, Rejected) and refused.rule == rule


def test_a_signed_body_is_never_rewritten() -> None:
    refused = audit("low", signed=True).start(RequestBody(CHAT_IMAGE, {}))
    assert isinstance(refused, Rejected) and refused.rule == "signed_request_rewrite"


def test_a_result_it_did_not_ask_for_or_work_not_done_is_a_refusal() -> None:
    body = audit()
    assert isinstance(body.start(RequestBody(CHAT_IMAGE, {})), Audited)
    refused = body.resume(Hashed("ab" * 32))  # a bug of the caller's
    assert isinstance(refused, Rejected) and refused.rule == "audit_internal_error"
    body = audit()
    assert isinstance(
        body.start(RequestBody(gzip.compress(CHAT_IMAGE), {"content-encoding": "gzip"})), Decode
    )
    refused = body.resume(Failed(RuntimeError("the executor is gone")))
    assert isinstance(refused, Rejected) and refused.rule == "audit_internal_error"
