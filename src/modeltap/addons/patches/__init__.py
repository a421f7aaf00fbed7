"""What replaces or wraps mitmproxy internals, kept apart from the addons so
that every place modeltap reaches inside mitmproxy is in one folder.

Each module here copies or wraps code of mitmproxy (or of wsproto, which
mitmproxy parses WebSocket frames with) that is not mitmproxy's public API:
a release may change it without notice, and the copy would go on running
the old code. :data:`REPLACED` is the one record of what was read: every
function, method or class modeltap replaces, wraps or overrides, with the
fingerprint (:func:`fingerprint`) of the code as it was read and the release
it was read in. ``tests/addons/test_patches.py`` fingerprints the installed
code and fails, naming what changed and what to re-read, when it differs.

When it fails: read the new code beside modeltap's (``by``), carry the change
over (or decide it does not matter), then write the new fingerprint and
release into the row.

The patches go in with :func:`replace`, which keeps the original the first
time (so installing twice changes nothing, and :func:`original` finds
mitmproxy's own code even once it is replaced).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from types import ModuleType
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class Replaced:
    """One piece of a library's code that modeltap replaces, wraps or overrides."""

    #: Where it lives, as ``module:qualified.name`` (``module:name`` for a module's global).
    target: str
    #: modeltap's code that copies, wraps or overrides it (what to bring in line),
    #: as ``module:qualified.name``.
    by: str
    #: How (a copy, a wrapper, a subclass).
    how: str
    #: The :func:`fingerprint` of the code as read.
    sha256: str
    #: The distribution and release it was read in, e.g. ``mitmproxy 12.3.1``.
    read_in: str

    def drift(self, found: str) -> str | None:
        """What to do when the installed code's fingerprint is ``found``, or None if unchanged."""
        if found == self.sha256:
            return None
        dist = self.read_in.split()[0]
        return (
            f"{self.target} is not the code {self.by} ({self.how}) was written against "
            f"({self.read_in}; installed: {dist} {version(dist)}). Re-read {self.target} in the "
            f"installed {dist}, bring {self.by} in line with it, then record sha256={found!r} "
            f"and read_in='{dist} {version(dist)}' in modeltap.addons.patches.REPLACED."
        )


#: Every piece of mitmproxy (and wsproto) that modeltap replaces, wraps or overrides.
REPLACED: Final[tuple[Replaced, ...]] = (
    Replaced(
        "mitmproxy.proxy.layers.http._http1:Http1Connection.read_body",
        by="modeltap.addons.patches.mitm_http1:read_body",
        how="a copy, with trailers and fixed framing errors",
        sha256="67eff9846ec41ea2122ac86d885da2675be3754dcbfacd8034094080b7fa649c",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy.proxy.layers.http._http1:make_error_response",
        by="modeltap.addons.http:_error_page",
        how="replaces it, installed by modeltap.addons.patches.error_page",
        sha256="01e6e81d28c30fead99d13f8069fd659dbe6166181b14a53cc89be1d1994771e",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy.proxy.layers.http:HttpStream.state_wait_for_request_headers",
        by="modeltap.addons.patches.request_limit:state_wait_for_request_headers",
        how="wraps it",
        sha256="778fcf104c9713455df531b7199b9f66126b27ca2fd9ab8acfcf0c0d60229364",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy.proxy.layers.http:HttpStream.state_consume_request_body",
        by="modeltap.addons.patches.request_limit:state_consume_request_body",
        how="wraps it",
        sha256="37e2d3448c67e0b755d2e5f2ae5cb4768b1829a0e9c3b05af99d53485630c073",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy.proxy.server:ConnectionHandler.close_connection",
        by="modeltap.addons.patches.request_limit:close_connection",
        how="wraps it",
        sha256="8babfdcfd2cd8c4e9656613a34b8365ddd720b5b9ae9d0f9d7bbd6c234b4c5ff",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy.proxy.layers.websocket:WebsocketLayer.start",
        by="modeltap.addons.patches.ws_limit:BoundedWebsocketLayer.start",
        how="a copy, with bounded extensions",
        sha256="306387881164f9bdc9c275db8d19fc8c778f73c891e2e2ffec11e49d34c19958",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy:ctx",
        by="modeltap.addons.patches.ctx_per_proxy:ContextCtx",
        how="replaces its globals master, options and log",
        sha256="a72c5d707ed445c843483e58f23277e1a9bf3078663352126f254bd8982e48e2",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "mitmproxy.addons.errorcheck:ErrorCheck",
        by="modeltap.app.proxy:_StartupCheck",
        how="a subclass: overrides shutdown_if_errored",
        sha256="f4bd9d1c5de019f2939e4a674abcd4701e403732f56d43d84d75b8a0b96de8c4",
        read_in="mitmproxy 12.3.1",
    ),
    Replaced(
        "wsproto.extensions:PerMessageDeflate.frame_inbound_header",
        by="modeltap.addons.patches.ws_limit:BoundedPerMessageDeflate.frame_inbound_header",
        how="a subclass: wraps it",
        sha256="81a1464a040683877c8bddb63b9b076f416e83452a0f69c779c99f8cafd05f69",
        read_in="wsproto 1.3.2",
    ),
    Replaced(
        "wsproto.extensions:PerMessageDeflate.frame_inbound_payload_data",
        by="modeltap.addons.patches.ws_limit:BoundedPerMessageDeflate.frame_inbound_payload_data",
        how="a subclass: replaces it, on its private state",
        sha256="297856574f88fc3604f6dd1461c6f3bcf51f171cfa1a9c5446250a51bde136a5",
        read_in="wsproto 1.3.2",
    ),
    Replaced(
        "wsproto.extensions:PerMessageDeflate.frame_inbound_complete",
        by="modeltap.addons.patches.ws_limit:BoundedPerMessageDeflate.frame_inbound_complete",
        how="a subclass: wraps it",
        sha256="b16c6f9d925d9742f8ab58d59d286c69fb13bcbb36eb21da4db90f61763db624",
        read_in="wsproto 1.3.2",
    ),
)

#: The originals of what :func:`replace` replaced, by ``module:qualified.name``.
_ORIGINALS: dict[str, Any] = {}


def _key(owner: type | ModuleType, name: str) -> str:
    if isinstance(owner, ModuleType):
        return f"{owner.__name__}:{name}"
    return f"{owner.__module__}:{owner.__qualname__}.{name}"


def capture(owner: type | ModuleType, name: str) -> Any:
    """``owner.name`` as it was before any modeltap patch (kept the first time it is
    asked for, so asking again after :func:`replace` still gives the original)."""
    return _ORIGINALS.setdefault(_key(owner, name), getattr(owner, name))


def replace(owner: type | ModuleType, name: str, new: Any) -> None:
    """Put ``new`` in place of ``owner.name``, keeping the original (idempotent)."""
    capture(owner, name)
    setattr(owner, name, new)


def captured() -> frozenset[str]:
    """The targets (``module:qualified.name``) captured so far."""
    return frozenset(_ORIGINALS)


def original(target: str) -> Any:
    """The code at ``target`` (``module:qualified.name``): the library's own even
    when modeltap replaced it, or an owner on its path, with :func:`replace`.

    Raises:
        ImportError, AttributeError: there is no such code.
    """
    module, _, path = target.partition(":")
    found: Any = importlib.import_module(module)
    parts = path.split(".")
    for depth, part in enumerate(parts, 1):
        key = f"{module}:{'.'.join(parts[:depth])}"
        if key in _ORIGINALS:
            found = _ORIGINALS[key]
        elif depth == 1 and not hasattr(found, part):
            found = importlib.import_module(f"{module}.{part}")  # a submodule not yet imported
        else:
            found = getattr(found, part)
    return found


def fingerprint(code: ModuleType | type | Callable[..., Any]) -> str:
    """The SHA-256 of ``code``'s source, as tokens: a change of layout or of a
    comment keeps it, any other change (a docstring too) changes it.

    Raises:
        OSError, TypeError: ``code`` has no source file (as :func:`inspect.getsource`).
    """
    source = inspect.getsource(code)
    kept: list[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER):
            continue
        # Indentation by its structure only, never its width.
        if token.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
            kept.append(tokenize.tok_name[token.type])
        else:
            kept.append(token.string)
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()
