"""``modeltap run`` as real processes: two writers on one out dir, kill -9 under
load, secrets in every place a client puts them, and what the proxy binds to."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import orjson
from websockets.sync.client import connect

from modeltap.app.cli import build_parser, config_from_args
from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.evidence.capture import Capture
from tests.otlp_receiver import HttpReceiver
from tests.reliability.faults import figure
from tests.upstream import Upstream

CHAT = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}
KEY = "sk-PLANTED-reliability-7c1e9a0b2d"
_LISTENING = re.compile(r"listening\s+http://\S+:(\d+)")


class ProxyProcess:
    """``python -m modeltap.app.cli run ... --listen HOST:0``; the port is read off the
    start-up screen. stderr is collected whole for the secrets scan."""

    def __init__(self, *args: str, host: str = "127.0.0.1") -> None:
        cmd = [sys.executable, "-m", "modeltap.app.cli", "run", "--listen", f"{host}:0", *args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.stderr = b""
        self._port: list[int] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(30) or not self._port:
            self.kill()
            raise RuntimeError(f"modeltap run did not start: {self.stderr.decode()}")
        self.port = self._port[0]
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line
            found = _LISTENING.search(line.decode(errors="replace"))
            if found and not self._port:
                self._port.append(int(found.group(1)))
                self._ready.set()
        self._ready.set()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(20)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def test_two_processes_append_to_one_out_dir(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    """2 x 300 requests, 8 in flight per process: every line whole, counts exact."""
    route = f"stub={upstream.url}"
    for _ in range(2):
        processes.append(ProxyProcess("--out", str(tmp_path), "--route", route, "-q"))

    def load(p: ProxyProcess) -> None:
        with httpx.Client(timeout=20) as client:

            def one(i: int) -> None:
                body = {**CHAT, "model": f"m-{p.port}-{i}"}
                resp = client.post(p.url + "/stub/v1/chat/completions", json=body)
                assert resp.status_code == 200

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(one, range(300)))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(load, processes))
    assert [p.stop() for p in processes] == [0, 0]

    audit = lines_of(tmp_path / "audit.jsonl")
    events = lines_of(tmp_path / "events.jsonl")
    assert len(audit) == 600 and all(line.endswith(b"\n") for line in audit)
    records = [orjson.loads(line) for line in audit]  # every line whole JSON
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_run.setdefault(r["run_id"], []).append(r)
    assert sorted(len(v) for v in by_run.values()) == [300, 300]
    for run in by_run.values():
        assert sorted(r["seq"] for r in run) == list(range(1, 301))
    assert len({r["model"] for r in records}) == 600
    responses = [e for e in map(orjson.loads, events) if e["kind"] == "response"]
    assert len(responses) == 600 and all(e["evidence_complete"] for e in responses)
    capture = Capture.load(tmp_path)
    assert capture.load_errors == ()
    assert len(upstream.received) == 600
    figure("two_processes", audit_lines=len(audit), events_lines=len(events), torn=0)


def test_kill_9_under_load(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    """SIGKILL mid-load: each line on disk is whole JSON (or a torn last line that
    Capture.load names), and nothing reached the upstream without its audit line."""
    p = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}", "-q")
    processes.append(p)
    stop = threading.Event()
    answered = [0]

    def hammer() -> None:
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                try:
                    if (
                        client.post(p.url + "/stub/v1/chat/completions", json=CHAT).status_code
                        == 200
                    ):
                        answered[0] += 1
                except httpx.HTTPError:
                    return

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while answered[0] < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.proc.send_signal(signal.SIGKILL)
    p.proc.wait(10)
    stop.set()
    for t in threads:
        t.join(10)
    assert answered[0] >= 200

    capture = Capture.load(tmp_path)
    for name in ("audit.jsonl", "events.jsonl"):
        lines = lines_of(tmp_path / name)
        for i, line in enumerate(lines):
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                assert i == len(lines) - 1 and not line.endswith(b"\n")
                assert any(e.file == name and e.line == i + 1 for e in capture.load_errors)
    # The audit line is written before forwarding, so the upstream cannot have
    # seen more requests than there are audit lines.
    assert len(upstream.received) <= len(capture.records)
    assert len(capture.records) >= answered[0]
    figure(
        "kill_9",
        answered=answered[0],
        audit_lines=len(capture.records),
        upstream_received=len(upstream.received),
        load_errors=[str(e) for e in capture.load_errors],
    )


def test_no_secret_in_files_stderr_or_spans(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    with HttpReceiver() as receiver:
        p = ProxyProcess(
            "--out", str(tmp_path), "--route", f"stub={upstream.url}", "--otlp", receiver.endpoint
        )
        processes.append(p)
        headers = {
            "authorization": f"Bearer {KEY}",
            "x-api-key": KEY,
            "api-key": KEY,
            "cookie": f"session={KEY}; other={KEY}",
            "proxy-authorization": f"Basic {KEY}",
        }
        query = {"key": KEY, "api_key": KEY, "api-key": KEY}
        base = p.url + "/stub/v1"
        with httpx.Client(timeout=10, headers=headers, params=query) as client:
            assert client.post(base + "/chat/completions", json=CHAT).status_code == 200
            stream = {**CHAT, "stream": True}
            assert client.post(base + "/chat/completions", json=stream).status_code == 200
            assert (
                client.post(base + "/responses", json={"model": "m", "input": "x"}).status_code
                == 200
            )
            body = {"model": "c", "max_tokens": 5, "messages": CHAT["messages"]}
            assert client.post(base + "/messages", json=body).status_code == 200
            assert client.post(base + "/chat/completions", json={"model": ""}).status_code == 400
            assert client.get(base + "/models").status_code == 200
            assert client.post(base + "/embeddings", json={}).status_code == 200
        ws_url = p.url.replace("http://", "ws://") + f"/stub/v1/responses?key={KEY}&api_key={KEY}"
        with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
            ws.send(orjson.dumps({"type": "response.create", "model": "m", "input": "x"}).decode())
            while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
                pass
            ws.send("not json")
            assert "modeltap_rejected" in ws.recv(timeout=10)
        assert p.stop() == 0
        spans = receiver.wait_for(8, timeout=10)
    # The keys were planted for real: the upstream received them.
    assert any(KEY in str(r.headers) for r in upstream.received)
    assert any(KEY in str(h) for h in upstream.ws_handshakes)

    assert spans, "no spans exported"
    assert KEY not in repr(spans)
    assert b"modeltap" in p.stderr and b"chat" in p.stderr  # the per-exchange lines
    assert KEY.encode() not in p.stderr
    written = sorted(tmp_path.iterdir())
    assert {f.name for f in written} >= {"audit.jsonl", "events.jsonl"}
    for f in written:
        assert KEY.encode() not in f.read_bytes(), f.name
    audit = [orjson.loads(line) for line in lines_of(tmp_path / "audit.jsonl")]
    assert len(audit) == 5 and all("REDACTED" in r["path"] for r in audit)
    figure("secrets", spans=len(spans), stderr_bytes=len(p.stderr), files=len(written), leaks=0)


def test_default_bind_is_loopback(tmp_path: Path) -> None:
    args = build_parser().parse_args(["run"])
    cfg = config_from_args(args)
    assert (cfg.listen_host, cfg.listen_port) == ("127.0.0.1", 8787)
    assert cfg.proxyauth is None and not cfg.allow_open_proxy
    assert ProxyConfig().listen_host == "127.0.0.1"
    with Proxy(ProxyConfig(listen_port=0, out=str(tmp_path), quiet=True)) as proxy:
        assert {host for host, _ in proxy.addresses} == {"127.0.0.1"}


def test_elsewhere_warns_and_proxyauth_guards_regular_mode(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    p = ProxyProcess(
        "--out", str(tmp_path), "--mode", "regular", "--route", f"stub={upstream.url}",
        "--proxyauth", "alice:s3cret", host="0.0.0.0",
    )  # fmt: skip
    processes.append(p)
    assert b"WARNING    listening on 0.0.0.0" in p.stderr
    target = upstream.url + "/v1/chat/completions"
    with httpx.Client(proxy=p.url, timeout=10) as anonymous:
        resp = anonymous.post(target, json=CHAT)
    assert resp.status_code == 407
    assert upstream.received == []
    with httpx.Client(proxy=f"http://alice:wrong@127.0.0.1:{p.port}", timeout=10) as wrong:
        assert wrong.post(target, json=CHAT).status_code == 407
    with httpx.Client(proxy=f"http://alice:s3cret@127.0.0.1:{p.port}", timeout=10) as client:
        resp = client.post(target, json=CHAT)
    assert resp.status_code == 200
    assert len(upstream.received) == 1
    assert "proxy-authorization" not in {k.lower() for k in upstream.received[0].headers}
    assert p.stop() == 0
    (record,) = [orjson.loads(line) for line in lines_of(tmp_path / "audit.jsonl")]
    assert record["route"] == "stub"
    assert b"s3cret" not in p.stderr
    for f in tmp_path.iterdir():
        assert b"s3cret" not in f.read_bytes()
