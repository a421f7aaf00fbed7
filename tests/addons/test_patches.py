"""The mitmproxy (and wsproto) code modeltap replaces is the code it was written
against: each row of :data:`modeltap.addons.patches.REPLACED` is checked against
the installed library's original, and fails, naming it and what to re-read,
when a release changed it. The fingerprints live in that table only.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import wsproto.extensions
from mitmproxy import ctx as mitm_ctx
from mitmproxy.addons import errorcheck
from mitmproxy.proxy import server
from mitmproxy.proxy.layers import websocket
from mitmproxy.proxy.layers.http import HttpStream, _http1

from modeltap.addons import http as http_addon
from modeltap.addons import patches
from modeltap.addons.patches import ctx_per_proxy, error_page, mitm_http1, request_limit, ws_limit

ROWS = {row.target: row for row in patches.REPLACED}


def install_every_patch() -> None:
    """Every install, as the addons and the proxy make them."""
    error_page.install(http_addon._error_page)
    mitm_http1.install()
    request_limit.install()
    ws_limit.install()
    ctx_per_proxy.install()


@pytest.fixture(autouse=True)
def installed() -> Iterator[None]:
    # Twice: installing again must neither lose an original nor wrap a wrapper.
    install_every_patch()
    install_every_patch()
    yield


@pytest.mark.parametrize("row", patches.REPLACED, ids=lambda row: row.target)
def test_the_installed_code_is_the_code_read(row: patches.Replaced) -> None:
    drift = row.drift(patches.fingerprint(patches.original(row.target)))
    assert drift is None, drift
    assert patches.original(row.by) is not None  # what to re-read beside it exists


def test_every_replacement_has_a_row() -> None:
    """What :func:`patches.replace` replaced, or the owner its rows are reached through."""
    assert patches.captured()
    for target in patches.captured():
        assert target in ROWS or any(row.startswith(f"{target}.") for row in ROWS), target


@pytest.mark.parametrize(
    ("owner", "name", "ours"),
    [
        (_http1.Http1Connection, "read_body", mitm_http1.read_body),
        (_http1, "make_error_response", http_addon._error_page),
        (
            HttpStream,
            "state_wait_for_request_headers",
            request_limit.state_wait_for_request_headers,
        ),
        (HttpStream, "state_consume_request_body", request_limit.state_consume_request_body),
        (server.ConnectionHandler, "close_connection", request_limit.close_connection),
        (websocket, "WebsocketLayer", ws_limit.BoundedWebsocketLayer),
    ],
)
def test_the_patch_is_in_place_and_mitmproxys_original_kept(
    owner: Any, name: str, ours: Any
) -> None:
    assert getattr(owner, name) is ours
    kept = patches.capture(owner, name)
    assert kept is not ours
    assert kept.__module__.startswith("mitmproxy.proxy."), kept


def test_what_is_changed_or_overridden_in_place_is_reached_directly() -> None:
    assert isinstance(mitm_ctx, ctx_per_proxy.ContextCtx)
    assert patches.original("mitmproxy:ctx") is mitm_ctx  # its class changes, not the module
    assert patches.original("mitmproxy.addons.errorcheck:ErrorCheck") is errorcheck.ErrorCheck
    deflate = wsproto.extensions.PerMessageDeflate
    found = patches.original("wsproto.extensions:PerMessageDeflate.frame_inbound_complete")
    assert found is deflate.frame_inbound_complete


class Owner:
    def method(self) -> str:
        return "original"


def test_capture_keeps_the_first_original() -> None:
    def ours(self: Owner) -> str:
        return "ours"

    key = f"{__name__}:Owner.method"
    try:
        patches.replace(Owner, "method", ours)
        patches.replace(Owner, "method", ours)
        assert Owner().method() == "ours"
        assert patches.capture(Owner, "method")(Owner()) == "original"
        assert patches.original(key)(Owner()) == "original"
    finally:
        Owner.method = patches._ORIGINALS.pop(key)  # type: ignore[method-assign]


# ------------------------------------------------------------------ the check can fail

ROW = ROWS["mitmproxy.proxy.layers.http._http1:make_error_response"]
ORIGINAL = inspect.getsource(patches.original(ROW.target))
IMPORTS = "from mitmproxy import http, version\nfrom mitmproxy.net.http import http1\n\n"


def load(path: Path, source: str) -> ModuleType:
    """``source`` as a module read from ``path``, so that inspect finds its code."""
    path.write_text(IMPORTS + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_copy_of_the_original_matches_its_row(tmp_path: Path) -> None:
    copy = load(tmp_path / "copy.py", ORIGINAL)
    assert ROW.drift(patches.fingerprint(copy.make_error_response)) is None


def test_layout_and_comments_do_not_count(tmp_path: Path) -> None:
    reflowed = ORIGINAL.replace("    resp = ", "    # a comment mitmproxy added\n\n    resp = ")
    reflowed = reflowed.replace("status_code,\n", "status_code,   \n")
    assert reflowed != ORIGINAL
    copy = load(tmp_path / "reflowed.py", reflowed)
    assert ROW.drift(patches.fingerprint(copy.make_error_response)) is None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('Connection="close"', 'Connection="keep-alive"'),  # a value
        ("    resp = ", '    """A docstring."""\n    resp = '),  # a docstring
        ('message: str = ""', 'message: str = "", *, html: bool = True'),  # the signature
    ],
)
def test_a_changed_original_is_named_with_what_to_reread(
    tmp_path: Path, old: str, new: str
) -> None:
    assert old in ORIGINAL
    changed = load(tmp_path / "changed.py", ORIGINAL.replace(old, new))
    found = patches.fingerprint(changed.make_error_response)
    drift = ROW.drift(found)
    assert drift is not None
    assert drift.startswith(
        "mitmproxy.proxy.layers.http._http1:make_error_response is not the code "
        f"modeltap.addons.http:_error_page ({ROW.how}) was written against "
        f"({ROW.read_in}; installed: mitmproxy "
    )
    assert (
        "Re-read mitmproxy.proxy.layers.http._http1:make_error_response in the installed "
        "mitmproxy, bring modeltap.addons.http:_error_page in line with it, then record "
        f"sha256={found!r}"
    ) in drift
