"""The output text of a recorded exchange: the ``messages`` channel, from ``--record``.

The evidence files hold no content, so a response's text exists only in a
``modeltap run --record DIR`` recording. A turn's recorded response is read
back the way the proxy read it live: its content coding undone
(:mod:`modeltap.wire.decoding`), a stream split by its framing
(:func:`modeltap.apis.stream_framing`) and fed to the wire's own stream
observer with content capture on, a whole body handed to the wire's
``response_content``, a WebSocket turn's server messages fed to its wire's
stream observer one by one. The text
is the text parts of the output messages, joined with newlines.

What it is worth is the turn's ``messages`` channel:

* ``complete``: the whole response was read (its stream to the terminal event);
* ``partial``: the recorded stream was cut, or the text is longer than the
  observers keep (:data:`~modeltap.apis.message_parts.CAPTURE_LIMIT`);
* ``unavailable``: the turn is not in the recording, the recording holds no
  response for it, or the body cannot be read (each says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from modeltap import apis
from modeltap.apis.contract import WireApi
from modeltap.apis.message_parts import CUT_MARK
from modeltap.evidence.coverage import ChannelCoverage
from modeltap.evidence.recordings import Entry, Recording
from modeltap.evidence.records import AuditRecord, Json, ResponseFacts
from modeltap.rules.errors import ModelTapError
from modeltap.wire.decoding import decode_body
from modeltap.wire.sse import SSEEvent

__all__ = ["MAX_RECORDED_BODY", "RecordedOutput", "not_in_recording", "recorded_output"]

#: Largest recorded response body read back for its text.
MAX_RECORDED_BODY: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RecordedOutput:
    """A turn's output text as the recording shows it, and what it is worth."""

    text: str | None
    messages: ChannelCoverage


def _unavailable(reason: str) -> RecordedOutput:
    return RecordedOutput(None, ChannelCoverage("unavailable", (reason,)))


def not_in_recording(root: object) -> RecordedOutput:
    """What a turn the recording does not hold is worth."""
    return _unavailable(
        f"this turn is not in the recording {root} (was the run recorded there, "
        "with the same sessions?)"
    )


def recorded_output(recording: Recording, entry: Entry, record: AuditRecord) -> RecordedOutput:
    """Read one turn's output text from its recorded exchange. Never raises.

    Args:
        recording: the loaded recording.
        entry: the turn's exchange (:func:`~modeltap.evidence.recordings.find_exchange`).
        record: the turn's audit record.

    Returns:
        The text (``None`` when none could be read) and the ``messages`` channel.
    """
    module = apis.find(record.api)
    if module is None:
        return _unavailable(f"modeltap cannot read {record.api} output")
    if entry.kind == "websocket":
        return _websocket_output(recording, entry, module)
    response = entry.line.get("response")
    if not isinstance(response, dict) or not isinstance(response.get("body"), str):
        broke = isinstance(response, dict) and response.get("error")
        why = f" ({broke})" if isinstance(broke, str) else ""
        return _unavailable(f"the recording holds no response body for this turn{why}")
    headers = response.get("headers")
    headers = headers if isinstance(headers, dict) else {}
    status = response.get("status")
    status = status if isinstance(status, int) else 200
    content_type = str(headers.get("content-type") or "")
    encoding = headers.get("content-encoding")
    try:
        raw = _read_blob(recording, response["body"])
        data = decode_body(raw, encoding if isinstance(encoding, str) else None)
    except (OSError, ValueError, ModelTapError):
        return _unavailable("the recorded response body cannot be read (missing or undecodable)")
    framing = apis.stream_framing(content_type, record.api, None, status, stream=record.stream)
    if framing is not None:
        decoder = framing.decoder()
        observer = module.StreamObserver(None, capture_content=True)
        try:
            for event in [*decoder.feed(data), *decoder.close()]:
                observer.feed(event)
        except ModelTapError:
            return _unavailable("the recorded stream cannot be decoded")
        error = response.get("error")
        return _from_facts(observer.finish(error if isinstance(error, str) else None))
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _unavailable("the recorded response body is not valid JSON")
    content = module.response_content(body) if isinstance(body, dict) else None
    if content is None or status >= 400:
        return _unavailable(f"the recorded response (HTTP {status}) holds no output of its own")
    return _from_messages(content.output_messages, ())


def _read_blob(recording: Recording, sha: str) -> bytes:
    path = recording.blobs.path(sha)
    if path.stat().st_size > MAX_RECORDED_BODY:
        raise ValueError("too large")
    return path.read_bytes()


def _websocket_output(recording: Recording, entry: Entry, module: WireApi) -> RecordedOutput:
    """A WebSocket turn: its server messages, each one event, through the wire's observer."""
    observer = module.StreamObserver(None, capture_content=True)
    for message in entry.line.get("messages") or ():
        if not isinstance(message, dict) or message.get("from") != "server":
            continue
        text: Any = message.get("text")
        if not isinstance(text, str):
            blob = message.get("blob")
            try:
                text = _read_blob(recording, blob) if isinstance(blob, str) else None
            except (OSError, ValueError):
                text = None
            if text is None:
                return _unavailable("a recorded WebSocket message is missing from the recording")
        data = text if isinstance(text, str) else text.decode("utf-8", "replace")
        observer.feed(SSEEvent(None, data))
        if observer.done:
            break
    return _from_facts(
        observer.finish(None if observer.done else "the recorded messages end early")
    )


def _from_facts(facts: ResponseFacts) -> RecordedOutput:
    problems = () if facts.evidence_complete else facts.capture_errors or ("not seen whole",)
    return _from_messages(facts.output_messages, problems)


def _from_messages(messages: list[Json] | None, problems: tuple[str, ...]) -> RecordedOutput:
    if messages is None:
        return _unavailable("the recorded response holds no output")
    texts = [
        part["content"]
        for message in messages
        for part in message.get("parts") or ()
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("content"), str)
    ]
    text = "\n".join(texts)
    coverage = ChannelCoverage()
    if problems:
        detail = ", ".join(problems)
        coverage = coverage.lower("partial", f"the recorded response was not seen whole ({detail})")
    if CUT_MARK in text:
        text = text[: text.index(CUT_MARK)]
        coverage = coverage.lower("partial", "the output text is longer than modeltap reads back")
    return RecordedOutput(text, coverage)
