"""The audit of a request's body, sans-I/O (SPEC 2, 3b).

:class:`BodyAudit` is fed the body as it arrived and answers what it needs
next, the way websockets' protocol objects hand back events::

    body ──▶ start() ──▶ Decode     (off the loop)   ──▶ resume(Decoded)
                         Reencode   (the glue)       ──▶ resume(Reencoded)
                         Digest     (off the loop)   ──▶ resume(Hashed)
                         Audited    (write the audit line, then forward)
                         Rejected   (refuse it)

Decoding a compressed body and hashing a large one are work for a worker
thread (zlib, Brotli, Zstandard and hashlib let go of the GIL), so other
exchanges go on meanwhile: :class:`Decode` and :class:`Digest` say so, and
their :meth:`~Decode.run` is what the thread runs. Putting a rewritten body
back on the request encoded as the client sent it (``--image-detail``) is the
glue's (:class:`Reencode`: mitmproxy knows the codings). Every step fails
closed: an exception other than a refusal is a refusal
(:func:`~modeltap.core.gate.fail_closed`), never a forward.

What the decoded body says is read by the audit's *reader* (a model
request's: :func:`model_reader`; an MCP POST's:
:func:`modeltap.core.mcp_exchange.read_body`): the codings, ``--max-body``
and the digest are the same for both.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import orjson

from modeltap import apis
from modeltap.apis import json_body
from modeltap.apis.contract import EndpointMatch
from modeltap.core.gate import fail_closed
from modeltap.evidence.records import Json, RequestFacts
from modeltap.rules.errors import Rejected, Rule
from modeltap.wire.decoding import check_transfer_coding, decode_request_body, request_codings

logger = logging.getLogger("modeltap")

#: Bodies at least this large are hashed on a worker thread.
HASH_IN_THREAD_BYTES: Final = 1024 * 1024


def hash_as_it_arrives(content_length: str, image_detail: str | None) -> bool:
    """Whether a model request's body is worth hashing while it arrives.

    Args:
        content_length: its ``Content-Length`` as sent (empty when none).
        image_detail: ``--image-detail``, if set: a body it rewrites is hashed
            as rewritten, so a digest of the body as sent would be wasted.

    Returns:
        True for a declared length of at least :data:`HASH_IN_THREAD_BYTES`.
    """
    return (
        image_detail is None
        and content_length.isdigit()
        and int(content_length) >= HASH_IN_THREAD_BYTES
    )


def body_codings(
    size: int, transfer_encoding: str | None, content_encoding: str | None, max_body: int
) -> tuple[str, ...]:
    """The content codings to undo before a body is audited.

    Args:
        size: the body's length as received.
        transfer_encoding: its ``Transfer-Encoding`` header, if any.
        content_encoding: its ``Content-Encoding`` header, if any.
        max_body: ``--max-body`` in bytes.

    Raises:
        Rejected: ``body_too_large`` or a refused coding.
    """
    if size > max_body:
        raise Rejected(Rule.BODY_TOO_LARGE)
    check_transfer_coding(transfer_encoding)
    return request_codings(content_encoding)


def parse_body(decoded: bytes, *, elide: bool) -> tuple[Json, bool]:
    """Parse a body for the audit; with ``elide``, without materialising large
    image payloads (the body forwarded is always the original).

    Returns:
        The parsed body, and whether it is the whole body (nothing elided):
        only then is it what the listeners would parse themselves.

    Raises:
        Rejected: the body is not a JSON object (or has duplicate keys).
    """
    if elide:
        short = json_body.elide_payloads(decoded)
        if short is not decoded:
            try:
                return json_body.parse_json_object(short), False
            except Rejected:
                pass  # the full parse below names the real fault
    return json_body.parse_json_object(decoded), True


def audit_parsed(
    api: str,
    body: Json,
    image_detail: str | None,
    endpoint: EndpointMatch | None = None,
    *,
    signed: bool = False,
) -> tuple[RequestFacts, bytes | None]:
    """Audit a parsed model request body, rewriting images' detail if asked.

    Args:
        api: the endpoint's API.
        body: the parsed body (:func:`parse_body`); ``--image-detail``
            rewrites it in place.
        image_detail: ``--image-detail``, if set.
        endpoint: what the request's path said (the gate's
            :func:`~modeltap.apis.match_endpoint`): it may name the model
            (Azure deployments, Bedrock, Vertex), ask for a stream, or ask
            more of the body (a cloud's native invoke body).
        signed: the request is SigV4-signed: its body is never rewritten.

    Returns:
        The request's facts, and the rewritten body when ``--image-detail``
        changed it (it must be forwarded instead: the audit shows what is
        actually sent), else None.

    Raises:
        Rejected: the body breaks a rule, or ``signed_request_rewrite`` when
            ``--image-detail`` would change a signed body (the signature
            covers it: a rewrite would make the upstream refuse it).
    """
    module = apis.module_for(api)
    rewritten = None
    if image_detail is not None and module.set_image_detail(body, image_detail):
        if signed:
            raise Rejected(Rule.SIGNED_REQUEST_REWRITE)
        rewritten = orjson.dumps(body)
    facts: RequestFacts = module.audit_request(body, endpoint)
    return facts, rewritten


def audit_body(
    api: str,
    decoded: bytes,
    image_detail: str | None,
    endpoint: EndpointMatch | None = None,
    *,
    signed: bool = False,
) -> tuple[RequestFacts, bytes | None]:
    """Parse and audit a decoded model request body (:func:`parse_body`, then
    :func:`audit_parsed`, which says what it returns and raises)."""
    body, _ = parse_body(decoded, elide=image_detail is None)
    return audit_parsed(api, body, image_detail, endpoint, signed=signed)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data``, 64 hex digits."""
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------- what goes in


@dataclass(frozen=True, slots=True)
class RequestBody:
    """A model request's body, whole, as it arrived."""

    #: The body as received (its content codings kept).
    raw: bytes
    #: Its headers, looked up case-insensitively by the glue's mapping (a test
    #: passes lower-case keys): the codings are read from them, and the
    #: ``forwarding`` listeners get them.
    headers: Mapping[str, str]
    #: ``raw`` was hashed while it arrived (:func:`hash_as_it_arrives`): its
    #: :class:`Digest` asks for that digest instead of hashing it again.
    hashed_as_it_arrived: bool = False


# ---------------------------------------------------------------------- what is asked


@dataclass(frozen=True, slots=True)
class Decoded:
    """What :class:`Decode` found: the body with its codings undone, or its refusal."""

    content: bytes | Rejected


@dataclass(frozen=True, slots=True)
class Hashed:
    """What :class:`Digest` found."""

    sha256: str


@dataclass(frozen=True, slots=True)
class Reencoded:
    """The body as it now goes upstream, after :class:`Reencode`."""

    raw: bytes


@dataclass(frozen=True, slots=True)
class Failed:
    """The glue could not do the work asked for (its executor is gone, say):
    the body is refused (``audit_internal_error``), never forwarded."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Decode:
    """Work off the loop: undo the body's content codings.

    zlib, Brotli and Zstandard let go of the GIL, so other exchanges go on
    while a large (or hostile) body inflates; decoding stops at ``max_body``.
    """

    raw: bytes
    codings: tuple[str, ...]
    max_body: int

    def run(self) -> Decoded:
        """Decode (on a worker thread). Never raises: a refusal is the result."""
        try:
            return Decoded(fail_closed(decode_request_body, self.raw, self.codings, self.max_body))
        except Rejected as e:
            return Decoded(e)


@dataclass(frozen=True, slots=True)
class Digest:
    """Work off the loop: the SHA-256 of the body as it goes upstream."""

    raw: bytes
    #: ``raw`` is the body hashed while it arrived: take that digest (the glue
    #: holds it) rather than hashing it again.
    from_arrival: bool = False

    def run(self) -> Hashed:
        """Hash (on a worker thread: hashlib lets go of the GIL on large data)."""
        return Hashed(sha256_hex(self.raw))


@dataclass(frozen=True, slots=True)
class Reencode:
    """Work for the glue: ``--image-detail`` rewrote the body. Put ``content``
    on the request encoded as the client sent it (the audit shows what is
    actually sent), then hand back the bytes that now go upstream."""

    content: bytes


#: What the audit may ask for before it is done.
Work = Decode | Digest | Reencode
#: What the glue hands back once it did it (or tried).
WorkDone = Decoded | Hashed | Reencoded | Failed


@dataclass(frozen=True, slots=True)
class Read[F]:
    """What a reader found in a decoded body (it refuses one by raising ``Rejected``)."""

    #: What the audit line is written from (a model request's :class:`RequestFacts`).
    facts: F
    #: The body, parsed, when it is the whole body as it goes upstream (kept
    #: on the exchange so listeners need not parse it again); else None.
    parsed: Json | None = None
    #: The body rewritten (``--image-detail``): it goes upstream instead.
    rewritten: bytes | None = None


@dataclass(frozen=True, slots=True)
class Audited[F]:
    """The body passed its audit: write its audit line, then forward it."""

    facts: F
    #: The decoded body as it goes upstream (rewritten, if it was).
    sent: bytes
    #: The size of the body as it goes upstream (its content codings kept).
    size: int
    sha256: str
    #: ``sent``, parsed, when the audit read it whole (None when it elided
    #: large payloads): kept on the exchange so listeners need not parse it again.
    body: Json | None = None


# ---------------------------------------------------------------------- the audit


def _failing_closed[T, F](
    step: Callable[[T], Work | Audited[F]], given: T
) -> Work | Audited[F] | Rejected:
    """Run a step of the audit; any exception is its refusal (:func:`fail_closed`)."""
    try:
        return fail_closed(step, given)
    except Rejected as e:
        return e


def model_reader(
    api: str,
    endpoint: EndpointMatch | None,
    *,
    signed: bool,
    image_detail: str | None,
) -> Callable[[bytes], Read[RequestFacts]]:
    """The reader of a model request's body: parsed (large payloads elided
    unless ``--image-detail`` rewrites images), then audited by its API.

    Args:
        api: the endpoint's API.
        endpoint: what the request's path said (see :func:`audit_parsed`).
        signed: the request is SigV4-signed (never rewritten).
        image_detail: ``--image-detail``, if set.
    """

    def read(decoded: bytes) -> Read[RequestFacts]:
        body, whole = parse_body(decoded, elide=image_detail is None)
        facts, rewritten = audit_parsed(api, body, image_detail, endpoint, signed=signed)
        # A rewrite changed the parsed body in place: it is what goes upstream.
        return Read(facts, body if whole else None, rewritten)

    return read


class BodyAudit[F]:
    """The audit of one request's body: fed the body, it answers the work it
    needs done until the body is :class:`Audited` or refused.

    Args:
        read: reads the decoded body (:func:`model_reader`), or refuses it.
        max_body: ``--max-body`` in bytes.
    """

    def __init__(self, read: Callable[[bytes], Read[F]], *, max_body: int) -> None:
        self._read = read
        self._max_body = max_body
        self._body = RequestBody(b"", {})
        #: The work asked for and not yet handed back.
        self._asked: Work | None = None
        self._found: Read[F] | None = None
        self._sent = b""
        self._raw = b""

    def start(self, body: RequestBody) -> Work | Audited[F] | Rejected:
        """Audit ``body``: what to do next.

        Returns:
            The work to do first, the audit's result, or its refusal
            (``body_too_large``, a refused coding, any rule of the body, or
            ``audit_internal_error``: every step fails closed).
        """
        return _failing_closed(self._start, body)

    def resume(self, done: WorkDone) -> Work | Audited[F] | Rejected:
        """The work asked for is done: what to do next (as :meth:`start`).

        Args:
            done: its result; a result of other work than was asked for is
                a bug (of the caller's), refused like any other.
        """
        return _failing_closed(self._resume, done)

    # The steps raise Rejected for a refusal; start and resume hand it back.

    def _start(self, body: RequestBody) -> Work | Audited[F]:
        self._body = body
        headers = body.headers
        te, ce = headers.get("transfer-encoding"), headers.get("content-encoding")
        codings = body_codings(len(body.raw), te, ce, self._max_body)
        if codings:
            return self._ask(Decode(body.raw, codings, self._max_body))
        return self._audit(body.raw)

    def _resume(self, done: WorkDone) -> Work | Audited[F]:
        asked, self._asked = self._asked, None
        if isinstance(done, Failed):
            logger.error(
                "modeltap: internal error while auditing (%s); refused", type(done.error).__name__
            )
            raise Rejected(Rule.AUDIT_INTERNAL_ERROR)
        if isinstance(asked, Decode) and isinstance(done, Decoded):
            if isinstance(done.content, Rejected):
                raise done.content
            return self._audit(done.content)
        if isinstance(asked, Reencode) and isinstance(done, Reencoded):
            self._raw = done.raw
            return self._digest()
        if isinstance(asked, Digest) and isinstance(done, Hashed):
            return self._audited(done.sha256)
        raise ValueError("the body audit was handed the result of other work than it asked for")

    def _ask(self, work: Work) -> Work:
        self._asked = work
        return work

    def _audit(self, decoded: bytes) -> Work | Audited[F]:
        self._found = found = self._read(decoded)
        if found.rewritten is not None:
            self._sent = found.rewritten
            return self._ask(Reencode(found.rewritten))
        self._sent, self._raw = decoded, self._body.raw
        return self._digest()

    def _digest(self) -> Work | Audited[F]:
        raw = self._raw
        from_arrival = raw is self._body.raw and self._body.hashed_as_it_arrived
        if from_arrival or len(raw) >= HASH_IN_THREAD_BYTES:
            return self._ask(Digest(raw, from_arrival))
        return self._audited(sha256_hex(raw))

    def _audited(self, sha256: str) -> Audited[F]:
        found = self._found
        assert found is not None  # a digest follows a reading
        return Audited(found.facts, self._sent, len(self._raw), sha256, found.parsed)
