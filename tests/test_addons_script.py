"""`mitmdump -s addons/modeltap.py` loads the same addon and audits."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import openai

from modeltap import control
from tests.conftest import read_jsonl
from tests.upstream import Upstream

ROOT = Path(__file__).resolve().parent.parent
MITMDUMP = Path(sys.executable).parent / "mitmdump"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_mitmdump_script_audits(upstream: Upstream, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            str(MITMDUMP), "-q", "-s", str(ROOT / "addons" / "modeltap.py"),
            "--mode", "reverse:http://127.0.0.1:9", "--listen-host", "127.0.0.1",
            "-p", str(port), "--set", "connection_strategy=lazy",
            "--set", f"modeltap_upstream={upstream.url}", "--set", f"modeltap_out={tmp_path}",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        out = client.chat.completions.create(
            model="gpt-5", messages=[], extra_headers={"x-modeltap-session": "dump-1"}
        )
        assert out.choices[0].message.content == "Hello from the stub."
        # The control API comes along, on its own listener, found through the out dir
        # (its file is written once mitmproxy is running, just after the port opens).
        while not list(tmp_path.glob("control-*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        (ended,) = control.end_session(tmp_path, "dump-1")
        assert ended.status.requests_audited == 1
    finally:
        proc.terminate()
        proc.wait(10)
    (record,) = read_jsonl(tmp_path / "audit.jsonl")
    assert (record["model"], record["route"], record["path"]) == (
        "gpt-5",
        "upstream",
        "/v1/chat/completions",
    )


def test_the_addons_share_one_run_under_names_of_their_own() -> None:
    from modeltap.addons import default_addons
    from modeltap.run import Run

    run = Run()
    addons = default_addons(run)
    names = [getattr(a, "name", None) for a in addons]
    assert all(n and n.startswith("modeltap_") for n in names) and len(set(names)) == len(names)
    assert all(getattr(a, "run", run) is run for a in addons)
