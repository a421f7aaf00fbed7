"""Request and response bodies for the page, from a ``--record`` directory.

The audit files hold no content (names, counts and hashes only), so the page
shows none unless the user hands it a recording (``modeltap view DIR
--record RECDIR``): that is the user's explicit choice to look at content.

A turn's recorded exchange is found by its session and, over HTTP, its
``seq`` (a WebSocket turn by its position in the session), and is used only
when the recording's turn key agrees with the audit record (model, tools,
instructions hash, image count, stream): a body is never shown beside a turn
it does not belong to. When the recorded request body's SHA-256 equals the
record's ``body_sha256`` (an uncompressed request), that exchange is
preferred: it is the very bytes that were audited.

Each body is cut at ``limit`` bytes (the page says so and gives the full
size), response bodies are decoded from their ``Content-Encoding`` with the
proxy's own decoder (bounded: a small compressed blob cannot inflate past
the limit), and bytes that are not UTF-8 are shown with replacement
characters. Bodies are stored once per blob, keyed by their SHA-256, in a
separate data block that the page parses only when a body is opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from modeltap.evidence.capture import Capture
from modeltap.evidence.recordings import Entry, Recording, RecordingError, find_exchange
from modeltap.rules.errors import ModelTapError
from modeltap.wire.decoding import StreamDecompressor

Json = dict[str, Any]

#: Bytes of one body put into the page by default.
DEFAULT_BODY_LIMIT: Final = 256 * 1024
#: Compressed bytes fed at once: a bomb inflates at most ~1000x of this per step.
_CHUNK: Final = 4 * 1024


class RecordingUnreadable(Exception):
    """The ``--record`` directory cannot be read."""


@dataclass(slots=True)
class PageBodies:
    """What :func:`attach_bodies` found: blobs by key, and how many turns got bodies."""

    blobs: dict[str, Json] = field(default_factory=dict)
    turns_with_bodies: int = 0
    turns_without: int = 0


def load_recording(directory: Path) -> Recording:
    """Read a ``modeltap run --record`` directory.

    Raises:
        RecordingUnreadable: it is not one (no readable ``recording.jsonl``).
    """
    try:
        return Recording.load(directory)
    except RecordingError as e:
        raise RecordingUnreadable(str(e)) from None


def _read_blob(recording: Recording, sha: Any, limit: int, encoding: str | None) -> Json:
    """One blob as page text: ``{"text", "bytes", "shown", "cut", "note"}``."""
    out: Json = {"text": "", "bytes": None, "shown": 0, "cut": False, "note": None}
    try:
        path = recording.blobs.path(str(sha))
        size = path.stat().st_size
        out["bytes"] = size
        with path.open("rb") as f:
            if encoding and encoding.strip().lower() not in ("", "identity"):
                data, cut = _decode_bounded(f, encoding, limit)
                out["note"] = f"decoded from Content-Encoding: {encoding}"
            else:
                data = f.read(limit + 1)
                cut = len(data) > limit
    except ValueError:
        out["note"] = "the recording names a blob that is not a SHA-256"
        return out
    except OSError:
        out["note"] = "the blob is missing from the recording"
        return out
    except ModelTapError:
        out["note"] = f"the body could not be decoded ({encoding})"
        return out
    data = data[:limit]
    out["text"] = data.decode("utf-8", "replace")
    out["shown"] = len(data)
    out["cut"] = cut
    return out


def _decode_bounded(f: Any, encoding: str, limit: int) -> tuple[bytes, bool]:
    decoder = StreamDecompressor(encoding)
    out = bytearray()
    while len(out) <= limit:
        chunk = f.read(_CHUNK)
        if not chunk:
            out += decoder.flush()
            break
        out += decoder.feed(chunk)
    return bytes(out), len(out) > limit


def _header(headers: Any, name: str) -> str | None:
    if not isinstance(headers, dict):
        return None
    value = headers.get(name)
    return value if isinstance(value, str) else None


def _blob_key(sha: str, encoding: str | None) -> str:
    return f"{sha}:{encoding}" if encoding else sha


def _exchange_json(recording: Recording, entry: Entry, limit: int, page: PageBodies) -> Json:
    line = entry.line

    def blob(sha: Any, encoding: str | None) -> str | None:
        if not isinstance(sha, str):
            return None
        key = _blob_key(sha, encoding)
        if key not in page.blobs:
            page.blobs[key] = _read_blob(recording, sha, limit, encoding)
        return key

    request = line.get("request")
    request = request if isinstance(request, dict) else {}
    response = line.get("response")
    response = response if isinstance(response, dict) else None
    out: Json = {
        "request": blob(request.get("body"), None),
        "response": None,
        "status": None,
        "error": None,
        "messages": None,
    }
    if response is not None:
        encoding = _header(response.get("headers"), "content-encoding")
        out["response"] = blob(response.get("body"), encoding)
        out["status"] = response.get("status")
        out["error"] = response.get("error")
        out["response_type"] = _header(response.get("headers"), "content-type")
    messages = line.get("messages")
    if isinstance(messages, list):
        shown: list[Json] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            item: Json = {"ms": message.get("ms"), "from": message.get("from")}
            text = message.get("text")
            if isinstance(text, str):
                encoded = text.encode()
                item["text"] = encoded[:limit].decode("utf-8", "replace")
                item["cut"] = len(encoded) > limit
                item["bytes"] = len(encoded)
            else:
                item["blob"] = blob(message.get("blob"), None)
            shown.append(item)
        out["messages"] = shown
    return out


def attach_bodies(
    data: Json, capture: Capture, recording: Recording, *, limit: int = DEFAULT_BODY_LIMIT
) -> PageBodies:
    """Add each turn's recorded bodies to the page data (``turn["bodies"]``).

    Args:
        data: from :func:`modeltap.report.view.data.build_view_data` for ``capture``.
        capture: the capture.
        recording: the loaded ``--record`` directory.
        limit: bytes of one body put into the page.

    Returns:
        The blobs by key (each body once) and counts of turns with and without bodies.
    """
    page = PageBodies()
    sessions = {s["id"]: s for s in data["sessions"]}
    for session in capture.sessions.values():
        turns = {t["index"]: t for t in sessions[session.session_id]["turns"]}
        position: dict[str, int] = {}
        for turn in session.turns:
            run = turn.record.run_id
            position[run] = position.get(run, 0) + 1
            entry = find_exchange(recording, session.session_id, turn.record, position[run])
            if entry is None:
                page.turns_without += 1
                turns[turn.index]["bodies"] = None
                continue
            page.turns_with_bodies += 1
            turns[turn.index]["bodies"] = _exchange_json(recording, entry, limit, page)
    data["bodies"] = {
        "recording": str(recording.root),
        "limit": limit,
        "turns_with_bodies": page.turns_with_bodies,
        "turns_without": page.turns_without,
    }
    return page
