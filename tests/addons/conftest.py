"""The addons under mitmproxy's own test harness: ``taddons`` and ``tflow``.

``tap`` loads every modeltap addon (sharing one run) beside the mitmproxy
addons whose options they read, configures them as ``modeltap run`` does,
and hands back the context; tests call the hooks directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from mitmproxy import http
from mitmproxy.addons import next_layer, proxyauth, proxyserver
from mitmproxy.test import taddons, tflow, tutils

from modeltap.addons import default_addons
from modeltap.app.proxy import ProxyConfig
from modeltap.core.run import Run
from tests.conftest import read_jsonl

CHAT = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]})


class Tap:
    """A taddons context with the modeltap addons loaded and configured."""

    def __init__(self, tctx: taddons.context, run: Run, addons: list[Any], out: Path) -> None:
        self.tctx = tctx
        self.run = run
        self.addons = addons
        self.out = out

    def addon[T](self, kind: type[T]) -> T:
        return next(a for a in self.addons if isinstance(a, kind))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = read_jsonl(self.out / "events.jsonl")
        return [e for e in lines if kind is None or e["kind"] == kind]

    def audit(self) -> list[dict[str, Any]]:
        return read_jsonl(self.out / "audit.jsonl")


@contextmanager
def tap(tmp_path: Path, **config: Any) -> Iterator[Tap]:
    """Every modeltap addon, configured from ``ProxyConfig(**config)`` (route
    ``stub`` to a closed port, quiet, out in ``tmp_path``)."""
    run = Run("run-1")
    addons = default_addons(run)
    config.setdefault("routes", ["stub=http://127.0.0.1:9"])
    config.setdefault("quiet", True)
    config.setdefault("control", "127.0.0.1:0")
    out = tmp_path / "out"
    mitmproxy_own = (proxyauth.ProxyAuth(), proxyserver.Proxyserver(), next_layer.NextLayer())
    with taddons.context(*mitmproxy_own, *addons) as tctx:
        values = ProxyConfig(out=str(out), **config).mitm_options()
        tctx.options.update(**{k: v for k, v in values.items() if k in tctx.options})
        try:
            yield Tap(tctx, run, addons, out)
        finally:
            for addon in addons:  # the control listener's socket, the files
                getattr(addon, "done", lambda: None)()


def model_flow(
    path: str = "/stub/v1/chat/completions", body: bytes = CHAT, **headers: str
) -> http.HTTPFlow:
    """A POST to a model endpoint, as mitmproxy hands it to ``requestheaders``."""
    fields = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    fields += [(k.encode(), v.encode()) for k, v in headers.items()]
    req = tutils.treq(
        method=b"POST", host="127.0.0.1", port=8787, path=path.encode(),
        headers=http.Headers(fields), content=body,
    )  # fmt: skip
    return tflow.tflow(req=req)


def json_response(body: bytes, status: int = 200, **headers: str) -> http.Response:
    fields = [(b"content-type", b"application/json")]
    fields += [(k.encode(), v.encode()) for k, v in headers.items()]
    return tutils.tresp(status_code=status, headers=http.Headers(fields), content=body)


def chat_through(t: Tap, **headers: str) -> http.HTTPFlow:
    """One chat exchange through the HTTP addon's hooks, answered in JSON."""
    from modeltap.addons.http import Http
    from tests.upstream import chat_text_json

    hooks = t.addon(Http)
    flow = model_flow(**headers)
    hooks.requestheaders(flow)
    hooks.request(flow)
    flow.response = json_response(orjson.dumps(chat_text_json("gpt-5").json))
    hooks.responseheaders(flow)
    hooks.response(flow)
    return flow
