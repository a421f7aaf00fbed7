"""Content-encoding decoders: response bodies, streamed or whole, and the
request bodies the audit reads.

:class:`StreamDecompressor` undoes ``Content-Encoding`` chunk by chunk so the
SSE observer sees text as it arrives, without buffering the response;
:func:`decode_body` does the same for a whole (non-streamed) body. Supported:
``identity``, ``gzip``/``x-gzip``, ``deflate`` (zlib-wrapped, or raw deflate as
some servers wrongly send and browsers accept), ``br`` and ``zstd``, stacked
with commas (``"gzip, br"`` was applied gzip first, so it is undone br first).
For a request body the audit reads, :func:`decode_request_body` undoes the
codings :func:`request_codings` names, stopping past a limit, and
:func:`check_transfer_coding` refuses any transfer-coding but ``chunked``.

Brotli comes from ``brotli`` and Zstandard from ``compression.zstd`` (Python
3.14+) or its backport ``backports.zstd``: the libraries mitmproxy itself
depends on, so modeltap adds no dependency.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator
from typing import Final, Protocol

import brotli

from modeltap.rules.errors import Rejected, Rule, UpstreamProtocolError

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
_ZLIB_WBITS: Final = zlib.MAX_WBITS
_RAW_DEFLATE_WBITS: Final = -zlib.MAX_WBITS


#: The most a decoder releases per call. Every layer hands its output on in
#: pieces of about this size, so a body that inflates a thousandfold (a
#: "zip bomb") is never materialised whole: the consumer can stop after any
#: piece. (Brotli may hand out up to twice this; its limit is a soft one.)
PIECE_BYTES: Final = 256 * 1024


class _Layer(Protocol):
    """One content-coding being undone, its output handed on in bounded pieces."""

    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def flush(self) -> Iterator[bytes]: ...


def _corrupt(name: str) -> UpstreamProtocolError:
    """Build the error for a broken ``name`` stream (fixed text, never the data)."""
    return UpstreamProtocolError(f"the {name} content-encoded response body is corrupt")


def _truncated(name: str) -> UpstreamProtocolError:
    """Build the error for a ``name`` stream that ended before its end marker."""
    return UpstreamProtocolError(f"the {name} content-encoded response body ended early")


class _IdentityLayer:
    """``identity``: bytes pass through unchanged."""

    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            yield data

    def flush(self) -> Iterator[bytes]:
        return iter(())


class _LibraryLayer:
    """What the library-backed layers share: a broken or cut-off stream said by name.

    A subclass decodes with its library in :meth:`_pieces` (raising the
    library's error, ``errors``) and says in :meth:`_finished` whether the
    stream reached its end marker.

    Args:
        name: the coding's name, for error messages.
        errors: the exception its library raises on corrupt input.
    """

    def __init__(self, name: str, errors: type[Exception]) -> None:
        self._name = name
        self._errors = errors
        self._fed = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if not data:
            return
        self._fed = True
        try:
            yield from self._pieces(data)
        except self._errors as exc:
            raise _corrupt(self._name) from exc

    def flush(self) -> Iterator[bytes]:
        # feed() drained the library completely, so there is nothing left to
        # flush; an empty body (e.g. a 204 that still names its coding) is fine,
        # a stream that stopped before its end marker was cut off.
        if self._fed and not self._finished():
            raise _truncated(self._name)
        return iter(())

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        raise NotImplementedError

    def _finished(self) -> bool:
        raise NotImplementedError


class _ZlibLayer(_LibraryLayer):
    """gzip, zlib-wrapped deflate or raw deflate, via :func:`zlib.decompressobj`.

    Args:
        name: the coding's name, for error messages.
        wbits: the zlib window/format selector.
    """

    def __init__(self, name: str, wbits: int) -> None:
        super().__init__(name, zlib.error)
        self._wbits = wbits
        self._inner = zlib.decompressobj(wbits)

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        more = True
        while data or more:
            if self._inner.eof:
                if self._wbits != _GZIP_WBITS or not data:
                    # zlib.decompress (and so mitmproxy) ignores bytes
                    # after a complete deflate stream; do the same.
                    return
                # gzip allows several members back to back (RFC 1952).
                self._inner = zlib.decompressobj(self._wbits)
            out = self._inner.decompress(data, PIECE_BYTES)
            # A full piece may leave output inside zlib even when all input
            # was taken: ask again (with no input) until a short piece.
            more = len(out) == PIECE_BYTES
            data = self._inner.unused_data if self._inner.eof else self._inner.unconsumed_tail
            if out:
                yield out

    def _finished(self) -> bool:
        return self._inner.eof


def _is_zlib_header(head: bytes) -> bool:
    """Whether two bytes are a valid zlib header (RFC 1950: CM 8, CINFO <= 7, FCHECK)."""
    cmf, flg = head[0], head[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and ((cmf << 8) | flg) % 31 == 0


class _DeflateLayer:
    """``deflate``: zlib-wrapped as RFC 9110 says, else raw deflate.

    Like browsers, the choice is made on the first two bytes: if they are not a
    valid zlib header, the body is taken as raw deflate.
    """

    def __init__(self) -> None:
        self._head = b""
        self._inner: _ZlibLayer | None = None

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._inner is None:
            head = self._head + data
            if len(head) < 2:
                self._head = head
                return iter(())
            self._head = b""
            wbits = _ZLIB_WBITS if _is_zlib_header(head) else _RAW_DEFLATE_WBITS
            self._inner = _ZlibLayer("deflate", wbits)
            data = head
        return self._inner.feed(data)

    def flush(self) -> Iterator[bytes]:
        if self._inner is None:
            if self._head:
                raise _truncated("deflate")
            return iter(())
        return self._inner.flush()


class _BrotliLayer(_LibraryLayer):
    """``br`` via :class:`brotli.Decompressor`."""

    def __init__(self) -> None:
        super().__init__("br", brotli.error)
        self._inner = brotli.Decompressor()

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        out: bytes = self._inner.process(data, output_buffer_limit=PIECE_BYTES)
        while True:
            if out:
                yield out
            if self._inner.can_accept_more_data():
                return
            # Output is waiting: brotli wants empty input until it is out.
            out = self._inner.process(b"", output_buffer_limit=PIECE_BYTES)

    def _finished(self) -> bool:
        return bool(self._inner.is_finished())


class _ZstdLayer(_LibraryLayer):
    """``zstd`` via :class:`ZstdDecompressor`, one per frame (frames may follow each other)."""

    def __init__(self) -> None:
        super().__init__("zstd", zstd.ZstdError)
        self._inner = zstd.ZstdDecompressor()

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        more = True
        while data or more:
            if self._inner.eof:
                if not data:
                    return
                self._inner = zstd.ZstdDecompressor()
            out = self._inner.decompress(data, PIECE_BYTES)
            more = not self._inner.eof and not self._inner.needs_input
            data = self._inner.unused_data if self._inner.eof else b""
            if out:
                yield out

    def _finished(self) -> bool:
        return self._inner.eof


def _make_layer(name: str) -> _Layer:
    """Return a fresh decoder for one coding name (already lower-cased and stripped)."""
    if name == "identity":
        return _IdentityLayer()
    if name in ("gzip", "x-gzip"):
        return _ZlibLayer("gzip", _GZIP_WBITS)
    if name == "deflate":
        return _DeflateLayer()
    if name == "br":
        return _BrotliLayer()
    if name == "zstd":
        return _ZstdLayer()
    # The name comes from an upstream header: show it, but never at length.
    raise UpstreamProtocolError(f"unsupported content-encoding {name[:40]!r}")


class StreamDecompressor:
    """Undo a response's ``Content-Encoding`` incrementally (sans-I/O).

    Feed each chunk as it arrives and pass on what :meth:`feed` returns; call
    :meth:`flush` once at the end of the body. Each call uses the libraries'
    streaming decoders, so memory follows the chunk being decoded, not the
    whole body.

    Args:
        encoding: the ``Content-Encoding`` header value, e.g. ``"gzip"`` or
            ``"gzip, br"`` (codings in the order they were applied; matched
            case-insensitively; empty entries and ``identity`` decode to
            themselves).

    Raises:
        UpstreamProtocolError: if a coding is not supported (the message names
            it).
    """

    def __init__(self, encoding: str) -> None:
        names = [part.strip().lower() for part in encoding.split(",")]
        # Applied left to right by the sender, so undone right to left.
        self._layers = [_make_layer(name) for name in reversed(names) if name]
        self._done = False

    @property
    def identity(self) -> bool:
        """Whether the body has no coding to undo (each chunk decodes to itself)."""
        return not self._layers

    def feed(self, data: bytes) -> bytes:
        """Decode the next chunk of the body.

        Args:
            data: the next bytes of the encoded body, split anywhere.

        Returns:
            The decoded bytes available so far (possibly empty).

        Raises:
            UpstreamProtocolError: if the data is corrupt for its coding (the
                message names the coding, never the data).
            RuntimeError: if called after :meth:`flush`.
        """
        if self._done:
            raise RuntimeError("StreamDecompressor.feed() called after flush()")
        for layer in self._layers:
            data = b"".join(layer.feed(data))
        return data

    def flush(self) -> bytes:
        """End the body and return any decoded bytes still held back.

        Returns:
            The last decoded bytes (often empty).

        Raises:
            UpstreamProtocolError: if the body is corrupt or ended before a
                coding's end marker (a cut-off stream), except that an entirely
                empty body is accepted.
        """
        self._done = True
        data = b""
        for layer in self._layers:
            # What the outer coding releases at its end is still input for
            # the inner one.
            data = b"".join([*layer.feed(data), *layer.flush()])
        return data


def decode_body(data: bytes, encoding: str | None) -> bytes:
    """Undo ``Content-Encoding`` on a whole body (a non-streamed response).

    Args:
        data: the encoded body.
        encoding: the ``Content-Encoding`` header value, or ``None`` if absent.

    Returns:
        The decoded body.

    Raises:
        UpstreamProtocolError: if a coding is unsupported, or the body is
            corrupt or truncated for it.
    """
    if not encoding:
        return data
    decompressor = StreamDecompressor(encoding)
    return decompressor.feed(data) + decompressor.flush()


# --------------------------------------------------------------------------
# Request bodies
#
# What is audited must be exactly what any HTTP server decodes (SPEC 2): only
# the HTTP content codings are undone (never Python's text codecs, which
# mitmproxy's get_content also accepts), and the decoded size is bounded by
# --max-body as it is produced, so a small body that inflates to gigabytes
# costs at most the limit.

#: The content codings a request body may carry, lower-cased.
REQUEST_CODINGS: Final = frozenset({"identity", "gzip", "x-gzip", "deflate", "br", "zstd"})


def request_codings(header: str | None) -> tuple[str, ...]:
    """Parse a request's ``Content-Encoding`` into the codings that need undoing.

    Args:
        header: the header's value (several header lines joined with ``", "``),
            or ``None`` when absent.

    Returns:
        The codings in the order they were applied, lower-cased, ``identity``
        and empty list elements left out: ``()`` means the body is as sent.

    Raises:
        Rejected: ``undecodable_content_encoding`` for any name outside
            :data:`REQUEST_CODINGS` (compared case-insensitively).
    """
    if not header:
        return ()
    codings: list[str] = []
    for part in header.split(","):
        name = part.strip(" \t").lower()
        if not name or name == "identity":
            continue
        if name not in REQUEST_CODINGS:
            raise Rejected(Rule.UNDECODABLE_CONTENT_ENCODING)
        codings.append(name)
    return tuple(codings)


def check_transfer_coding(header: str | None) -> None:
    """Refuse a request body sent with a transfer-coding other than ``chunked``.

    mitmproxy undoes ``chunked`` and forwards any other transfer-coding
    (``gzip, chunked``, ``deflate, chunked``) as it came, so an upstream that
    honours it would read a body other than the one audited.

    Args:
        header: the ``Transfer-Encoding`` value, or ``None`` when absent.

    Raises:
        Rejected: ``undecodable_content_encoding`` (detail ``transfer-coding``).
    """
    if header is None:
        return
    codings = [part.strip(" \t").lower() for part in header.split(",")]
    if [name for name in codings if name] != ["chunked"]:
        raise Rejected(Rule.UNDECODABLE_CONTENT_ENCODING, "transfer-coding")


def decode_request_body(data: bytes, codings: tuple[str, ...], limit: int) -> bytes:
    """Undo a request body's content codings, stopping as soon as it passes ``limit``.

    The body goes through the decoders in pieces of :data:`PIECE_BYTES`, each
    coding's output feeding the next lazily, so memory stays near ``limit``
    whatever the compression ratio. zlib, Brotli and Zstandard release the GIL
    while they work: call this on a worker thread for large or unknown input.

    Args:
        data: the body as received.
        codings: from :func:`request_codings`.
        limit: the largest decoded size accepted (``--max-body``).

    Returns:
        The decoded body.

    Raises:
        Rejected: ``body_too_large`` once the decoded size passes ``limit``;
            ``undecodable_content_encoding`` if the body is corrupt or cut
            short for its codings.
    """
    if not codings:
        if len(data) > limit:
            raise Rejected(Rule.BODY_TOO_LARGE)
        return data
    pieces: Iterator[bytes] = (data[i : i + PIECE_BYTES] for i in range(0, len(data), PIECE_BYTES))
    # Applied left to right by the sender, so undone right to left.
    for name in reversed(codings):
        pieces = _undo(_make_layer(name), pieces)
    out = bytearray()
    try:
        for piece in pieces:
            out += piece
            if len(out) > limit:
                raise Rejected(Rule.BODY_TOO_LARGE)
    except UpstreamProtocolError:
        raise Rejected(Rule.UNDECODABLE_CONTENT_ENCODING) from None
    return bytes(out)


def _undo(layer: _Layer, source: Iterator[bytes]) -> Iterator[bytes]:
    """Run ``source`` through one decoder, piece by piece, then end it."""
    for chunk in source:
        yield from layer.feed(chunk)
    yield from layer.flush()
