"""Trusting an upstream's private CA (``--upstream-ca FILE``): the file is read
and checked at start, then added to the public roots (pure; no mitmproxy).

Self-hosted model servers (vLLM, a corporate gateway) often present a
certificate from a private CA. mitmproxy's own option for it
(``ssl_verify_upstream_trusted_ca``) *replaces* the public roots, which would
break the default routes to ``api.openai.com`` and ``api.anthropic.com`` (and
every provider host in regular mode); modeltap trusts the private CA *beside*
them, the way ``NODE_EXTRA_CA_CERTS`` does for Node.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Final

_PEM_CERTIFICATE: Final = b"-----BEGIN CERTIFICATE-----"


def read_ca_file(path: str) -> bytes:
    """Read a CA file and check that TLS can use it.

    Args:
        path: the ``--upstream-ca`` value.

    Returns:
        Its bytes: PEM, one or more certificates.

    Raises:
        ValueError: naming the path and what is wrong with it (missing,
            unreadable, no PEM certificate, a certificate TLS cannot load).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else type(e).__name__
        raise ValueError(f"--upstream-ca {path}: cannot read it: {reason}") from None
    if _PEM_CERTIFICATE not in data:
        raise ValueError(
            f"--upstream-ca {path}: no PEM certificate in it (a '-----BEGIN CERTIFICATE-----' "
            "block); convert a DER file with: openssl x509 -inform der -in FILE -out FILE.pem"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=data.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        # Not the library's message: it may quote bytes of the file.
        raise ValueError(f"--upstream-ca {path}: a certificate in it cannot be loaded") from None
    return data


def trust_bundle(public_roots: bytes, extra: bytes) -> bytes:
    """The roots to verify upstreams with: the public ones, then the extra CA.

    Args:
        public_roots: the PEM bundle trusted so far (certifi's, or the one
            mitmproxy was told to use).
        extra: the checked ``--upstream-ca`` file.

    Returns:
        One PEM bundle.
    """
    return public_roots.rstrip(b"\n") + b"\n" + extra.rstrip(b"\n") + b"\n"
