"""Whole lines after a full disk, and a new file after a rename or delete (SPEC 8).

The disk fault is real: a small tmpfs (``mount``; skipped where the sandbox
does not allow it), filled up so that the audit file's last page has room for
only part of the next line: the kernel then writes that part (a short write)
and the rest fails with ENOSPC. Two ``modeltap run`` processes share the out
dir; after the fragment, space is freed and the *other* process writes next.

Renames and deletes run against two proxies in this process sharing one out
dir (the same code path as two processes: each holds its own descriptors).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import orjson
import pytest

from modeltap.evidence.capture import Capture
from tests.reliability.faults import figure, wait_until
from tests.reliability.test_processes import ProxyProcess
from tests.reliability.test_unwritable_audit import tmpfs
from tests.upstream import Upstream

PAGE = 4096


def chat(i: int, tools: int = 0) -> dict[str, Any]:
    """A chat request; ``tools`` client tools make its audit line longer than a page."""
    body: dict[str, Any] = {"model": f"m-{i}", "messages": [{"role": "user", "content": "x"}]}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": f"tool_{n:04d}_with_a_long_name"}}
            for n in range(tools)
        ]
    return body


def fill(fs: Path) -> Path:
    """Fill the file system to the last byte; return the filler to delete later."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (PAGE, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def test_full_disk_tears_one_line_and_the_next_writer_is_whole(
    tmp_path: Path, upstream: Upstream
) -> None:
    started = time.perf_counter()
    with tmpfs(tmp_path / "mnt", "512k") as mnt:
        out = mnt / "out"
        route = f"stub={upstream.url}"
        a = ProxyProcess("--out", str(out), "--route", route, "-q")
        b = ProxyProcess("--out", str(out), "--route", route, "-q")
        try:
            with httpx.Client(timeout=10) as client:

                def post(p: ProxyProcess, body: dict[str, Any]) -> int:
                    url = p.url + "/stub/v1/chat/completions"
                    return int(client.post(url, json=body).status_code)

                assert post(a, chat(1)) == 200
                assert post(b, chat(2)) == 200
                size = (out / "audit.jsonl").stat().st_size
                assert size % PAGE != 0  # its last page has room left: a short write will come
                filler = fill(mnt)
                # The line is longer than what the page has left: part is written, then ENOSPC.
                assert post(a, chat(3, tools=150)) == 503
                torn = (out / "audit.jsonl").stat().st_size
                assert torn > size and not (out / "audit.jsonl").read_bytes().endswith(b"\n")
                assert post(b, chat(4)) == 503  # still full: refused, nothing forwarded
                filler.unlink()  # space returns
                assert post(b, chat(5)) == 200  # the other process writes next
                assert post(a, chat(6)) == 200
                assert post(a, chat(7, tools=150)) == 200
            assert a.stop() == 0 and b.stop() == 0
        finally:
            a.kill()
            b.kill()
        lines = (out / "audit.jsonl").read_bytes().splitlines(keepends=True)
        capture = Capture.load(out)
    whole = []
    for line in lines:
        try:
            whole.append(orjson.loads(line)["model"])
        except orjson.JSONDecodeError:
            continue
    # Every forwarded request has a whole line; the refused ones have none.
    assert whole == ["m-1", "m-2", "m-5", "m-6", "m-7"]
    assert [r.json()["model"] for r in upstream.received] == whole
    assert all(line.endswith(b"\n") for line in lines)
    errors = [e for e in capture.load_errors if e.file == "audit.jsonl"]
    assert len(errors) == 1 and "torn write" in errors[0].message
    assert errors[0].line == 3
    figure(
        "torn_line_two_processes",
        forwarded=len(whole),
        refused=2,
        load_errors=len(errors),
        lines_lost=0,
        seconds=round(time.perf_counter() - started, 1),
    )


@pytest.fixture
def pair(tmp_path: Path, upstream: Upstream) -> Iterator[tuple[Path, list[ProxyProcess]]]:
    """Two ``modeltap run`` processes, one out dir."""
    out = tmp_path / "out"
    processes: list[ProxyProcess] = []
    try:
        for _ in range(2):
            processes.append(
                ProxyProcess("--out", str(out), "--route", f"stub={upstream.url}", "-q")
            )
        yield out, processes
    finally:
        for p in processes:
            p.kill()


def read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def reopened(out: Path) -> list[tuple[str, str]]:
    return [
        (e["file"], e["reason"]) for e in read(out / "events.jsonl") if e["kind"] == "file_reopened"
    ]


@pytest.mark.parametrize("how", ["rename", "delete", "replace", "remove_dir"])
def test_moved_files_are_reopened_at_their_path(
    pair: tuple[Path, list[ProxyProcess]], upstream: Upstream, how: str
) -> None:
    out, proxies = pair
    started = time.perf_counter()
    with httpx.Client(timeout=10) as client:

        def post(i: int, proxy: ProxyProcess) -> None:
            url = proxy.url + "/stub/v1/chat/completions"
            assert client.post(url, json=chat(i)).status_code == 200

        post(1, proxies[0])
        post(2, proxies[1])
        wait_until(lambda: len(read(out / "events.jsonl")) >= 2)
        if how == "rename":  # a log rotation: the old file lives on under a new name
            (out / "audit.jsonl").rename(out / "audit.jsonl.1")
        elif how == "delete":
            (out / "audit.jsonl").unlink()
            (out / "events.jsonl").unlink()
        elif how == "replace":  # rotation with a fresh file created in its place
            (out / "audit.jsonl").rename(out / "audit.jsonl.1")
            (out / "audit.jsonl").touch()
        else:  # the harness cleaned the whole out dir between tests
            shutil.rmtree(out)
        post(3, proxies[0])
        post(4, proxies[1])
        post(5, proxies[0])
    # The records after the move are in the file at the path, from both writers.
    assert [r["model"] for r in read(out / "audit.jsonl")] == ["m-3", "m-4", "m-5"]
    assert len(upstream.received) == 5
    # Each process says so once per file it had to reopen: the first to write
    # after the move found the path gone (or a stranger's file: replaced), the
    # second found a file the first had made.
    first = "replaced" if how == "replace" else "missing"
    expected = [("audit.jsonl", first), ("audit.jsonl", "replaced")]
    if how in ("delete", "remove_dir"):
        expected += [("events.jsonl", "missing"), ("events.jsonl", "replaced")]
    assert [p.stop() for p in proxies] == [0, 0]
    assert sorted(reopened(out)) == sorted(expected)
    assert Capture.load(out).load_errors == ()
    figure(
        f"reopen_{how}", forwarded=5, lines_lost=0, seconds=round(time.perf_counter() - started, 2)
    )
