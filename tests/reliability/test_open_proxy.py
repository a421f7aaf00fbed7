"""No accidental open proxy: a forwarding mode on a non-loopback address needs
proxy authentication or an explicit, loud opt-in; ``modeltap run``, ``mitmdump -s
addons/modeltap.py`` and the Python API all refuse it, in one line that names
the address and the fix."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from modeltap.app.proxy import Proxy, ProxyConfig
from tests.cli_process import cli_main
from tests.reliability.test_processes import CHAT, ProxyProcess
from tests.test_addons_script import MITMDUMP, ROOT, free_port
from tests.upstream import Upstream


def modeltap_run(*args: str) -> subprocess.CompletedProcess[str]:
    """``modeltap run ARGS`` in this process: refused, it exits before starting anything."""
    return cli_main("run", *args)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(
    ("listen", "extra"),
    [("0.0.0.0", []), ("[::]", []), ("192.0.2.1", []), ("0.0.0.0", ["--proxyauth", "any"])],
    ids=["all-ipv4", "all-ipv6", "one-address", "proxyauth-any"],
)
def test_modeltap_run_refuses_an_open_regular_proxy(
    tmp_path: Path, listen: str, extra: list[str]
) -> None:
    port = free_port()
    done = modeltap_run(
        "--mode", "regular", "--listen", f"{listen}:{port}", "--out", str(tmp_path), *extra
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    host = listen.strip("[]")
    assert lines[0].startswith("modeltap: refusing to start an open proxy: regular mode on ")
    assert f"{host}:{port}" in lines[0]
    assert "--proxyauth USER:PASS" in lines[0] and "--allow-open-proxy" in lines[0]
    assert not listening(port)
    assert not (tmp_path / "audit.jsonl").exists()


def test_allow_open_proxy_starts_and_says_so_loudly(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    p = ProxyProcess(
        "--out", str(tmp_path), "--mode", "regular", "--allow-open-proxy", host="0.0.0.0"
    )  # fmt: skip
    processes.append(p)
    assert b"WARNING    OPEN PROXY on 0.0.0.0:" in p.stderr
    with httpx.Client(proxy=p.url, timeout=10) as client:
        assert client.post(upstream.url + "/v1/chat/completions", json=CHAT).status_code == 200
    assert p.stop() == 0


def test_reverse_mode_elsewhere_only_warns(
    tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]
) -> None:
    """Reverse mode reaches only its routes: not an open proxy, but still said."""
    p = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}", host="0.0.0.0")
    processes.append(p)
    assert b"WARNING    listening on 0.0.0.0: anyone who can reach it can use it" in p.stderr
    assert b"OPEN PROXY" not in p.stderr
    assert p.stop() == 0


def test_python_api_refuses_too(tmp_path: Path) -> None:
    cfg = ProxyConfig(mode="regular", listen_host="0.0.0.0", listen_port=0, out=str(tmp_path))
    with pytest.raises(RuntimeError) as exc:
        Proxy(cfg).start()
    cause = str(exc.value.__cause__)
    assert "refusing to start an open proxy: regular mode on 0.0.0.0:0" in cause
    assert "modeltap_allow_open_proxy=true" in cause
    cfg.proxyauth = "alice:s3cret"
    with Proxy(cfg) as proxy:
        assert proxy.addresses


def mitmdump(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(MITMDUMP), "-s", str(ROOT / "addons" / "modeltap.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_mitmdump_in_regular_mode_on_every_interface_is_refused(tmp_path: Path) -> None:
    """mitmproxy's own defaults: regular mode, listen_host "" (every interface)."""
    port = free_port()
    proc = mitmdump("-p", str(port), "--set", f"modeltap_out={tmp_path}")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"refusing to start an open proxy: regular mode on *:" in out
    assert b"listen_host=127.0.0.1, proxyauth=USER:PASS, or modeltap_allow_open_proxy=true" in out


def test_mitmdump_on_loopback_runs(tmp_path: Path, upstream: Upstream) -> None:
    port = free_port()
    proc = mitmdump(
        "--listen-host", "127.0.0.1", "-p", str(port), "--set", f"modeltap_out={tmp_path}",
        "--set", "modeltap_mode=regular",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not listening(port):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with httpx.Client(proxy=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.post(upstream.url + "/v1/chat/completions", json=CHAT).status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("allow", [True, False])
def test_a_bad_option_is_reported_as_itself(tmp_path: Path, allow: bool) -> None:
    """Refusing an open proxy must not mask another error (mitmproxy rolls failed
    option updates back; the check must not then judge its defaults)."""
    host = "0.0.0.0" if allow else "127.0.0.1"
    cfg = ProxyConfig(
        mode="regular", listen_host=host, listen_port=0, out=str(tmp_path), max_body="lots",
        allow_open_proxy=allow,
    )  # fmt: skip
    with pytest.raises(RuntimeError) as exc:
        Proxy(cfg).start()
    assert "modeltap_max_body must be a size" in str(exc.value.__cause__)
