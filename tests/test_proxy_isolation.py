"""Two proxies in one Python process stay apart: each audits its own traffic
into its own out dir, under its own options (issue 15: two fixtures wrote each
other's audit lines, because mitmproxy hands every connection to the master
made last)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from modeltap.app.proxy import Proxy, ProxyConfig
from tests.conftest import read_jsonl
from tests.upstream import Upstream


def ask(proxy: Proxy, model: str) -> None:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])


def test_two_proxies_write_their_own_lines(tmp_path: Path, upstream: Upstream) -> None:
    first = Proxy(
        ProxyConfig(listen_port=0, out=str(tmp_path / "a"), upstream=upstream.url, quiet=True)
    )
    second = Proxy(
        ProxyConfig(
            listen_port=0, out=str(tmp_path / "b"), upstream=upstream.url, strict=True, quiet=True
        )
    )
    with first, second:
        for proxy, model in ((first, "a-1"), (second, "b-1"), (first, "a-2"), (second, "b-2")):
            ask(proxy, model)
        # Options stay each proxy's own: the strict one refuses what the other passes.
        # (The stub answers {"ok": true}, which the SDK finds empty: that is after the proxy.)
        lenient = openai.OpenAI(base_url=first.url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(ValueError, match="No embedding data"):
            lenient.embeddings.create(model="e", input="x")
        strict = openai.OpenAI(base_url=second.url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="strict_unaudited"):
            strict.embeddings.create(model="e", input="x")
    for name, proxy, models_seen in (("a", first, ["a-1", "a-2"]), ("b", second, ["b-1", "b-2"])):
        lines = read_jsonl(tmp_path / name / "audit.jsonl")
        assert [line["model"] for line in lines] == models_seen
        assert {line["run_id"] for line in lines} == {proxy.run_id}
    kinds = [e["kind"] for e in read_jsonl(tmp_path / "a" / "events.jsonl")]
    assert "unaudited" in kinds and "rejected" not in kinds
    kinds = [e["kind"] for e in read_jsonl(tmp_path / "b" / "events.jsonl")]
    assert "rejected" in kinds and "unaudited" not in kinds


def test_errors_logged_by_other_threads_do_not_stop_a_start(
    tmp_path: Path, upstream: Upstream
) -> None:
    """An OTLP exporter's worker thread logs its failures at ERROR (a collector
    that is down, another proxy's exporter in the same process): mitmproxy's
    start-up check stopped whichever proxy was starting at that moment."""
    import logging
    import threading

    stop = threading.Event()

    def noisy_exporter() -> None:
        log = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
        while not stop.is_set():
            log.error("Failed to export span batch code: 503")
            stop.wait(0.001)

    worker = threading.Thread(target=noisy_exporter, daemon=True)
    worker.start()
    try:
        for n in range(3):
            proxy = Proxy(
                ProxyConfig(
                    listen_port=0, out=str(tmp_path / str(n)), upstream=upstream.url, quiet=True
                )
            )
            with proxy:
                ask(proxy, f"m-{n}")
            assert [r["model"] for r in read_jsonl(tmp_path / str(n) / "audit.jsonl")] == [f"m-{n}"]
    finally:
        stop.set()
        worker.join()
