"""An audit file that cannot be written: model requests are refused with 503,
nothing reaches the upstream unaudited, and the proxy recovers by itself.

Tests run as root here, so ``chmod`` would not stop a write. The faults are
real ones instead: a read-only tmpfs (EROFS), an immutable directory
(``chattr +i``), a full tmpfs (ENOSPC) and ``/dev/full`` (ENOSPC on every
write). Whichever the machine cannot provide (no ``mount`` permission in an
unprivileged container) is skipped and says why; ``/dev/full`` always works.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import orjson
import pytest
from websockets.sync.client import connect

from modeltap.app.proxy import Proxy, ProxyConfig
from tests.conftest import Running
from tests.reliability.faults import wait_until
from tests.upstream import Upstream

CHAT = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]})
CREATE = orjson.dumps({"type": "response.create", "model": "gpt-5", "input": "x"}).decode()


def run(*cmd: str) -> bool:
    """Run a privileged command; False when the sandbox does not allow it."""
    if shutil.which(cmd[0]) is None:
        return False
    done = subprocess.run(cmd, capture_output=True, timeout=10, check=False)
    return done.returncode == 0


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    if not run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)):
        pytest.skip("mount -t tmpfs is not permitted here")
    try:
        yield where
    finally:
        run("umount", "-l", str(where))


class Fault:
    """Breaks the out dir, and mends it later.

    A fault the start-up check sees (a read-only or immutable dir stops the
    start: tests/test_startup.py) breaks the dir once the proxy runs
    (``after_start``); the others break it before, where the check cannot see
    them (a disk that fills up, a file whose writes fail).
    """

    after_start = False

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.out = tmp / "out"
        self._stack = contextlib.ExitStack()

    def setup(self) -> None:
        """Make the out dir the fault needs (before the proxy starts)."""

    def breakdown(self) -> None:
        raise NotImplementedError

    def mend(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stack.close()


class ReadOnlyFs(Fault):
    after_start = True

    def setup(self) -> None:
        mnt = self._stack.enter_context(tmpfs(self.tmp / "mnt", "1m"))
        self.out = mnt / "out"
        self.out.mkdir()

    def breakdown(self) -> None:
        assert run("mount", "-o", "remount,ro", str(self.out.parent))
        with pytest.raises(OSError) as exc:
            (self.out / "probe").write_bytes(b"x")
        assert exc.value.errno == errno.EROFS

    def mend(self) -> None:
        assert run("mount", "-o", "remount,rw", str(self.out.parent))


class ImmutableDir(Fault):
    after_start = True

    def setup(self) -> None:
        self.out.mkdir()

    def breakdown(self) -> None:
        if not run("chattr", "+i", str(self.out)):
            pytest.skip("chattr +i is not supported here")
        self._stack.callback(run, "chattr", "-i", str(self.out))
        with pytest.raises(OSError):
            (self.out / "probe").write_bytes(b"x")

    def mend(self) -> None:
        assert run("chattr", "-i", str(self.out))


class FullTmpfs(Fault):
    def breakdown(self) -> None:
        mnt = self._stack.enter_context(tmpfs(self.tmp / "mnt", "64k"))
        self.out = mnt / "out"
        self.out.mkdir()
        self.filler = mnt / "filler"
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError) as exc:
                for _ in range(1000):  # 64 KiB in 4 KiB pages: bounded
                    os.write(fd, b"\0" * 4096)
            assert exc.value.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def mend(self) -> None:
        self.filler.unlink()


class DevFull(Fault):
    """``audit.jsonl`` is a symlink to /dev/full: every write fails with ENOSPC."""

    def breakdown(self) -> None:
        self.out.mkdir()
        (self.out / "audit.jsonl").symlink_to("/dev/full")

    def mend(self) -> None:
        (self.out / "audit.jsonl").unlink()


@pytest.mark.parametrize("fault_type", [ReadOnlyFs, ImmutableDir, FullTmpfs, DevFull])
def test_unwritable_audit_refuses_then_recovers(
    tmp_path: Path, upstream: Upstream, fault_type: type[Fault]
) -> None:
    fault = fault_type(tmp_path)
    proxy: Proxy | None = None
    try:
        fault.setup()
        if not fault.after_start:
            fault.breakdown()
        cfg = ProxyConfig(
            listen_port=0, out=str(fault.out), routes=[f"stub={upstream.url}"], quiet=True
        )
        proxy = Proxy(cfg).start()
        if fault.after_start:
            fault.breakdown()
        running = Running(proxy, fault.out, upstream)
        url = running.base() + "/v1/chat/completions"
        ws_url = running.base().replace("http://", "ws://") + "/v1/responses"
        for _ in range(3):
            resp = httpx.post(url, content=CHAT, timeout=10)
            assert resp.status_code == 503
            assert "rule audit_write_failed" in resp.json()["error"]["message"]
        with connect(ws_url, open_timeout=10) as ws:
            ws.send(CREATE)
            refusal = orjson.loads(ws.recv(timeout=10))
            assert refusal["error"]["code"] == "modeltap_rejected"
            assert "audit_write_failed" in refusal["error"]["message"]
        # Nothing went upstream unaudited: no request, no WebSocket message.
        assert upstream.received == []
        assert upstream.ws_received == []
        assert proxy.counts["audited"] == 0

        fault.mend()  # fixed: the proxy recovers by itself, no restart
        assert httpx.post(url, content=CHAT, timeout=10).status_code == 200
        with connect(ws_url, open_timeout=10) as ws:
            ws.send(CREATE)
            while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
                pass
        assert [r["transport"] for r in running.audit()] == ["http", "websocket"]
        assert len(upstream.received) == 1 and len(upstream.ws_received) == 1
        if fault_type is DevFull:  # only audit.jsonl was broken: the refusals are logged
            rejected = wait_until(
                lambda: len(running.events("rejected")) >= 4 and running.events("rejected")
            )
            assert [e["rule"] for e in rejected] == ["audit_write_failed"] * 4
    finally:
        if proxy is not None:
            proxy.stop()
        fault.close()
