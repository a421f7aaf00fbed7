"""Tests for modeltap.wire.decoding: streamed and whole-body content decoding."""

from __future__ import annotations

import gzip
import random
import sys
import tracemalloc
import zlib
from collections.abc import Callable

import brotli
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy.net import encoding as mitmproxy_encoding

from modeltap.rules.errors import Rejected, UpstreamProtocolError
from modeltap.wire.decoding import (
    PIECE_BYTES,
    StreamDecompressor,
    check_transfer_coding,
    decode_body,
    decode_request_body,
    request_codings,
)

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd


def _payload() -> bytes:
    """An SSE-like body with some incompressible bytes, about 40 KiB."""
    rng = random.Random(1234)
    parts = []
    for i in range(300):
        parts.append(
            b'event: response.output_text.delta\ndata: {"type":"delta","i":%d,"delta":"%s"}\n\n'
            % (i, rng.randbytes(rng.randint(0, 40)).hex().encode())
        )
    parts.append(rng.randbytes(2000))
    return b"".join(parts)


PAYLOAD = _payload()


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "identity": lambda data: data,
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
}
# Raw deflate is also sent as "deflate" by some servers; browsers accept it.
CASES = [*ENCODERS.items(), ("deflate", raw_deflate)]
CASE_IDS = [*ENCODERS, "deflate-raw"]


def stream_decode(encoding: str, chunks: list[bytes]) -> bytes:
    decompressor = StreamDecompressor(encoding)
    out = [decompressor.feed(chunk) for chunk in chunks]
    out.append(decompressor.flush())
    return b"".join(out)


def random_chunks(data: bytes, seed: int, max_size: int = 700) -> list[bytes]:
    rng = random.Random(seed)
    chunks, pos = [], 0
    while pos < len(data):
        size = rng.randint(0, max_size)  # zero-length chunks included on purpose
        chunks.append(data[pos : pos + size])
        pos += size
    return chunks


# --- round trips


@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_whole_body(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    assert decode_body(encode(PAYLOAD), encoding) == PAYLOAD


@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_one_byte_chunks(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    encoded = encode(PAYLOAD)
    chunks = [encoded[i : i + 1] for i in range(len(encoded))]
    assert stream_decode(encoding, chunks) == PAYLOAD


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_random_chunks(encoding: str, encode: Callable[[bytes], bytes], seed: int) -> None:
    encoded = encode(PAYLOAD)
    assert stream_decode(encoding, random_chunks(encoded, seed)) == PAYLOAD


@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_every_split_point_of_a_small_body(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    body = b"data: {}\n\n" * 5
    encoded = encode(body)
    for i in range(len(encoded) + 1):
        assert stream_decode(encoding, [encoded[:i], encoded[i:]]) == body, i


@given(
    body=st.binary(max_size=3000),
    case=st.sampled_from(CASES),
    seed=st.integers(0, 2**32),
)
def test_any_body_any_chunking(
    body: bytes, case: tuple[str, Callable[[bytes], bytes]], seed: int
) -> None:
    encoding, encode = case
    assert stream_decode(encoding, random_chunks(encode(body), seed, 64)) == body


@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_agrees_with_mitmproxy(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    encoded = encode(PAYLOAD)
    theirs = "gzip" if encoding == "x-gzip" else encoding  # mitmproxy lacks the alias
    assert decode_body(encoded, encoding) == mitmproxy_encoding.decode(encoded, theirs)


def _flushing_encoder(encoding: str) -> Callable[[bytes], bytes]:
    """Return an encoder that flushes after each call, as a streaming server does."""
    if encoding in ("gzip", "deflate", "deflate-raw"):
        wbits = {"gzip": 31, "deflate": 15, "deflate-raw": -15}[encoding]
        zcompressor = zlib.compressobj(wbits=wbits)
        return lambda data: zcompressor.compress(data) + zcompressor.flush(zlib.Z_SYNC_FLUSH)
    if encoding == "br":
        bcompressor = brotli.Compressor()
        return lambda data: bcompressor.process(data) + bcompressor.flush()
    zcompressor2 = zstd.ZstdCompressor()
    return lambda data: zcompressor2.compress(data, zstd.ZstdCompressor.FLUSH_BLOCK)


@pytest.mark.parametrize("name", ["gzip", "deflate", "deflate-raw", "br", "zstd"])
def test_each_flushed_chunk_decodes_at_once(name: str) -> None:
    # The SSE observer must see each event when the upstream sends it, not at
    # the end of the body: a server's flush must come out of our feed().
    encode = _flushing_encoder(name)
    decompressor = StreamDecompressor(name.removesuffix("-raw"))
    for i in range(50):
        event = b'data: {"i": %d}\n\n' % i
        assert decompressor.feed(encode(event)) == event


@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_empty_body(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    assert stream_decode(encoding, []) == b""
    assert stream_decode(encoding, [b"", b""]) == b""
    assert decode_body(encode(b""), encoding) == b""


def test_no_encoding_passes_through() -> None:
    assert decode_body(PAYLOAD, None) == PAYLOAD
    assert decode_body(PAYLOAD, "") == PAYLOAD


def test_encoding_names_are_case_and_space_insensitive() -> None:
    assert decode_body(gzip.compress(PAYLOAD), " GZip ") == PAYLOAD
    assert decode_body(brotli.compress(PAYLOAD), "BR") == PAYLOAD


# --- stacked encodings


@pytest.mark.parametrize(
    ("header", "encoders"),
    [
        ("gzip, br", [gzip.compress, brotli.compress]),
        ("br, gzip", [brotli.compress, gzip.compress]),
        ("deflate, zstd", [zlib.compress, zstd.compress]),
        ("zstd,deflate", [zstd.compress, raw_deflate]),
        ("identity, gzip", [gzip.compress]),
        ("gzip, identity", [gzip.compress]),
        ("gzip, gzip", [gzip.compress, gzip.compress]),
        ("gzip,,br", [gzip.compress, brotli.compress]),
    ],
)
def test_stacked_encodings_decode_in_reverse(
    header: str, encoders: list[Callable[[bytes], bytes]]
) -> None:
    encoded = PAYLOAD
    for encode in encoders:  # applied in header order
        encoded = encode(encoded)
    assert decode_body(encoded, header) == PAYLOAD
    assert stream_decode(header, [encoded[i : i + 1] for i in range(len(encoded))]) == PAYLOAD
    assert stream_decode(header, random_chunks(encoded, 7)) == PAYLOAD


def test_stacked_order_matters() -> None:
    encoded = brotli.compress(gzip.compress(PAYLOAD))
    with pytest.raises(UpstreamProtocolError):
        decode_body(encoded, "br, gzip")


# --- multi-member / multi-frame / trailing bytes


def test_gzip_multiple_members() -> None:
    encoded = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decode_body(encoded, "gzip") == b"first second"
    assert stream_decode("gzip", [encoded[i : i + 1] for i in range(len(encoded))]) == (
        b"first second"
    )


def test_zstd_multiple_frames() -> None:
    encoded = zstd.compress(b"first ") + zstd.compress(b"second")
    assert decode_body(encoded, "zstd") == b"first second"
    assert stream_decode("zstd", [encoded[i : i + 1] for i in range(len(encoded))]) == (
        b"first second"
    )


def test_zstd_streamed_frame_without_content_size() -> None:
    compressor = zstd.ZstdCompressor()
    encoded = compressor.compress(PAYLOAD) + compressor.flush()
    assert stream_decode("zstd", random_chunks(encoded, 3, 50)) == PAYLOAD


def test_deflate_ignores_trailing_bytes_like_zlib() -> None:
    encoded = zlib.compress(b"hello") + b"trailing"
    assert decode_body(encoded, "deflate") == zlib.decompress(encoded) == b"hello"


def test_gzip_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(UpstreamProtocolError, match="gzip"):
        decode_body(gzip.compress(b"hello") + b"garbage!", "gzip")


def test_brotli_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(UpstreamProtocolError, match="br"):
        decode_body(brotli.compress(b"hello") + b"garbage!", "br")


# --- errors


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate", "br", "zstd"])
def test_garbage_is_corrupt(encoding: str) -> None:
    secret = b"sk-secret-key-material-not-compressed-at-all\x00\xff" * 4
    with pytest.raises(UpstreamProtocolError) as caught:
        decode_body(secret, encoding)
    message = str(caught.value)
    assert ("gzip" if encoding == "x-gzip" else encoding) in message
    assert "sk-secret" not in message


def zstd_with_checksum(data: bytes) -> bytes:
    return zstd.compress(data, options={zstd.CompressionParameter.checksum_flag: 1})


# Only formats with a checksum can be relied on to notice flipped bytes: raw
# deflate and checksum-less zstd may decode them to other bytes silently.
CHECKSUMMED = [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("br", brotli.compress),
    ("zstd", zstd_with_checksum),
]


@pytest.mark.parametrize(("encoding", "encode"), CHECKSUMMED, ids=[c[0] for c in CHECKSUMMED])
def test_corrupted_middle_raises(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    encoded = bytearray(encode(PAYLOAD))
    for i in range(len(encoded) // 3, len(encoded) // 3 + 64):
        encoded[i] ^= 0xA5
    with pytest.raises(UpstreamProtocolError):
        stream_decode(encoding, random_chunks(bytes(encoded), 1))


@pytest.mark.parametrize(("encoding", "encode"), CASES[1:], ids=CASE_IDS[1:])
def test_truncated_body_raises_on_flush(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    encoded = encode(PAYLOAD)
    decompressor = StreamDecompressor(encoding)
    partial = decompressor.feed(encoded[: len(encoded) // 2])
    assert PAYLOAD.startswith(partial)
    with pytest.raises(UpstreamProtocolError, match="ended early"):
        decompressor.flush()


def test_single_byte_deflate_body_is_truncated() -> None:
    with pytest.raises(UpstreamProtocolError, match="deflate"):
        decode_body(b"x", "deflate")


@pytest.mark.parametrize("encoding", ["compress", "sdch", "foo", "gzip, foo", "aes128gcm"])
def test_unknown_encoding(encoding: str) -> None:
    with pytest.raises(UpstreamProtocolError, match="unsupported content-encoding"):
        StreamDecompressor(encoding)
    with pytest.raises(UpstreamProtocolError, match="unsupported content-encoding"):
        decode_body(b"data", encoding)


def test_unknown_encoding_message_is_short() -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        StreamDecompressor("x" * 10_000)
    assert len(str(caught.value)) < 100


def test_feed_after_flush_fails() -> None:
    decompressor = StreamDecompressor("gzip")
    decompressor.feed(gzip.compress(b"a"))
    decompressor.flush()
    with pytest.raises(RuntimeError):
        decompressor.feed(b"more")


# ---------------------------------------------------------------- request bodies


@pytest.mark.parametrize(
    ("header", "codings"),
    [
        (None, ()),
        ("", ()),
        ("identity", ()),
        ("IDENTITY", ()),
        ("gzip", ("gzip",)),
        ("X-Gzip", ("x-gzip",)),
        (" Deflate\t", ("deflate",)),
        ("br", ("br",)),
        ("ZSTD", ("zstd",)),
        ("gzip, br", ("gzip", "br")),
        ("gzip,,identity, zstd", ("gzip", "zstd")),
    ],
)
def test_request_codings_parse(header: str | None, codings: tuple[str, ...]) -> None:
    assert request_codings(header) == codings


@pytest.mark.parametrize(
    "header",
    [
        "base64",
        "quoted-printable",
        "bz2",
        "zlib",
        "lzma",
        "compress",
        "utf-8",
        "rot13",
        "gzip, base64",
        "gzip;q=1",
        "gzip br",
        "gzi\u0130p",
        "x" * 10_000,
    ],
)
def test_request_codings_refuse_everything_else(header: str) -> None:
    with pytest.raises(Rejected) as caught:
        request_codings(header)
    assert caught.value.rule == "undecodable_content_encoding"
    assert header[:20] not in caught.value.message


@pytest.mark.parametrize(("encoding", "encode"), CASES, ids=CASE_IDS)
def test_request_body_round_trip_and_exact_limit(
    encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    codings = request_codings(encoding)
    encoded = encode(PAYLOAD)
    assert decode_request_body(encoded, codings, len(PAYLOAD)) == PAYLOAD
    with pytest.raises(Rejected) as caught:
        decode_request_body(encoded, codings, len(PAYLOAD) - 1)
    assert caught.value.rule == "body_too_large"


def test_request_body_stacked_codings() -> None:
    encoded = gzip.compress(zstd.compress(brotli.compress(PAYLOAD)))
    codings = request_codings("br, zstd, gzip")
    assert decode_request_body(encoded, codings, len(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize(
    ("encoding", "data"),
    [
        ("gzip", gzip.compress(PAYLOAD)[:-5]),
        ("gzip", b"not gzip"),
        ("deflate", b"\x78"),
        ("br", brotli.compress(PAYLOAD)[:-3]),
        ("zstd", zstd.compress(PAYLOAD)[:-3]),
        ("zstd", b"\x28\xb5\x2f\xfd garbage"),
    ],
)
def test_request_body_corrupt_is_undecodable(encoding: str, data: bytes) -> None:
    with pytest.raises(Rejected) as caught:
        decode_request_body(data, request_codings(encoding), 10 * len(PAYLOAD))
    assert caught.value.rule == "undecodable_content_encoding"


def test_request_body_without_codings_is_checked_against_the_limit() -> None:
    assert decode_request_body(b"abc", (), 3) == b"abc"
    with pytest.raises(Rejected):
        decode_request_body(b"abcd", (), 3)


BOMB_LIMIT = 1024 * 1024
ZEROS = 256 * 1024 * 1024


@pytest.mark.parametrize(
    ("encoding", "make"),
    [
        ("gzip", lambda: gzip.compress(b"\0" * ZEROS, 1)),
        ("deflate", lambda: zlib.compress(b"\0" * ZEROS, 1)),
        ("br", lambda: brotli.compress(b"\0" * ZEROS, quality=1)),
        ("zstd", lambda: zstd.compress(b"\0" * ZEROS)),
        ("gzip, gzip", lambda: gzip.compress(gzip.compress(b"\0" * ZEROS, 1))),
    ],
    ids=["gzip", "deflate", "br", "zstd", "gzip-gzip"],
)
def test_a_bomb_stops_at_the_limit_without_inflating_it(
    encoding: str, make: Callable[[], bytes]
) -> None:
    """256 MiB of zeros, limit 1 MiB: refused, and Python never holds more than a
    few pieces of output (tracemalloc sees every bytes object zlib and co. return)."""
    bomb = make()
    tracemalloc.start()
    try:
        with pytest.raises(Rejected) as caught:
            decode_request_body(bomb, request_codings(encoding), BOMB_LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.rule == "body_too_large"
    assert peak < BOMB_LIMIT + 8 * PIECE_BYTES


@pytest.mark.parametrize("header", [None, "chunked", "Chunked", " chunked ", "chunked,"])
def test_chunked_is_the_only_transfer_coding(header: str | None) -> None:
    check_transfer_coding(header)


@pytest.mark.parametrize(
    "header",
    ["gzip, chunked", "deflate,chunked", "identity, chunked", "chunked, chunked", "", "br"],
)
def test_other_transfer_codings_are_refused(header: str) -> None:
    with pytest.raises(Rejected) as caught:
        check_transfer_coding(header)
    assert caught.value.rule == "undecodable_content_encoding"
    assert caught.value.detail == "transfer-coding"
