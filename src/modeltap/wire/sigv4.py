"""Is a request signed with AWS Signature Version 4? (pure)

SigV4 (boto3, the AWS SDKs, AnthropicBedrock, Claude Code on Bedrock) signs
the method, the path exactly as sent, the query, the Host and the other
headers it lists in ``SignedHeaders``, and a hash of the body. Whatever
changes any of them on the way (another Host, a path prefix stripped, a
header removed, a body rewritten) makes the upstream refuse the request with
a signature error. So modeltap must know a signed request when it sees one
(SPEC section 2, "Signatures"): in regular (forward) mode it goes out
byte-for-byte, nothing removed or rewritten; in reverse mode, which must send
it to another host under another path, it is refused (``signed_request``).

A request is signed when its ``Authorization`` header uses an AWS4 scheme
(``AWS4-HMAC-SHA256``; ``AWS4-ECDSA-P256-SHA256`` is SigV4a) or its query
is presigned: an ``X-Amz-Algorithm`` naming an AWS4 algorithm (any case,
name and value percent-decoded; AWS reads no query signature without it, so
an ``X-Amz-Signature`` alone is just a parameter). Bearer tokens (Bedrock API
keys) are not signatures: those requests may be changed like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote_plus

#: The scheme prefix of AWS's signing algorithms in an ``Authorization`` header.
_AWS4: Final = "aws4-"


@dataclass(frozen=True, slots=True)
class Signature:
    """A SigV4 signature found on a request.

    Attributes:
        signed_headers: the header names it covers, lower case, as its
            ``SignedHeaders`` lists them (empty when not readable, e.g. in
            the query of a presigned request whose list was not found).
        presigned: True when the signature is in the query string.
    """

    signed_headers: tuple[str, ...]
    presigned: bool = False

    def covers(self, header: str) -> bool:
        """Whether removing or changing ``header`` breaks the signature.

        When the signed header list could not be read, every header counts as
        covered: modeltap then changes none.
        """
        return not self.signed_headers or header.lower() in self.signed_headers


def find_signature(authorization: str | None, query: str) -> Signature | None:
    """The SigV4 signature of a request, or ``None`` when it is not signed.

    Args:
        authorization: the ``Authorization`` header's value, or ``None``.
        query: the query string (without ``?``).

    Returns:
        The signature, with the headers it covers.
    """
    if authorization is not None and authorization.lstrip().lower().startswith(_AWS4):
        return Signature(_signed_headers(authorization))
    if query:
        signed: tuple[str, ...] = ()
        found = False
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            key = unquote_plus(name).lower()
            if key == "x-amz-algorithm":
                found = unquote_plus(value).lower().startswith(_AWS4)
            elif key == "x-amz-signedheaders":
                signed = _header_list(unquote_plus(value))
        if found:
            return Signature(signed, presigned=True)
    return None


def _signed_headers(authorization: str) -> tuple[str, ...]:
    """The ``SignedHeaders=a;b;c`` list of an AWS4 ``Authorization`` value."""
    for field in authorization.split(","):
        name, _, value = field.strip().partition("=")
        if name.strip().lower().endswith("signedheaders"):
            return _header_list(value)
    return ()


def _header_list(value: str) -> tuple[str, ...]:
    return tuple(name.strip().lower() for name in value.split(";") if name.strip())
