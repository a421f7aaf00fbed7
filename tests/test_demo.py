"""``modeltap demo`` as a user runs it: the records shown the way the report
shows turns, not as raw 800-character JSON lines (issue 15)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from modeltap.app.demo import record_lines
from tests.cli_process import cli_main
from tests.conftest import read_jsonl
from tests.factories import audit_record


def test_the_demo_shows_records_as_a_table(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "modeltap.app.cli", "demo", "--fast", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("{")]  # no raw JSON
    start = lines.index(
        f"== {tmp_path / 'audit.jsonl'}: one record per model request, written before forwarding"
    )
    header, *rows = lines[start + 1 : start + 5]
    assert header.split() == [
        "seq", "model", "tools", "advertised", "tool", "results", "sent", "instructions", "body"
    ]  # fmt: skip
    records = read_jsonl(tmp_path / "audit.jsonl")
    assert len(rows) == len(records) == 3
    assert max(len(line) for line in [header, *rows]) <= 100  # the JSON lines were ~800
    for row, record in zip(rows, records, strict=True):
        seq, model, *_ = row.split()
        assert (int(seq), model) == (record["seq"], record["model"])
        assert record["instructions_sha256"][:8] + "…" in row
        assert f"{record['body_bytes']:,} B" in row
    assert "call_weather1 48 B" in rows[1] and rows[0].split()[4] == "-"
    assert lines[start + 5] == (
        f"   (names, counts, hashes and sizes only; every field: jq . {tmp_path / 'audit.jsonl'})"
    )
    assert f"== modeltap report {tmp_path}" in lines  # then the report itself


def test_an_out_dir_it_cannot_use_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    done = subprocess.run(
        [sys.executable, "-m", "modeltap.app.cli", "demo", "--out", str(tmp_path / "notes.txt")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"modeltap demo: cannot use {tmp_path / 'notes.txt'} as the out dir: it is not a directory"
    ]


def test_unknown_stays_said() -> None:
    record = audit_record(tool_names=None, instructions_sha256=None, tool_results=())
    (_, row) = record_lines([record])
    assert row.split()[2:6] == ["not", "stated", "-", "not"]
    assert record_lines([]) == []


def _demo(*args: str, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modeltap.app.cli", "demo", "--fast", *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )  # fmt: skip


def test_the_demo_ends_with_the_view_command_and_leaves_one_dir(tmp_path: Path) -> None:
    """The demo's last line is the ``modeltap view`` command for what it made;
    run as printed, it writes the page. A second demo removes the first's
    directory (its own scratch), and never another."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    other = scratch / "modeltap-demo-not-mine"  # no mark: not the demo's own
    other.mkdir()
    made = []
    for _ in range(2):
        done = _demo(tmpdir=scratch)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        command = lines[-2].strip()
        assert command.startswith("modeltap view "), lines[-4:]
        out = Path(shlex.split(command)[2])
        assert out.parent == scratch
        made.append(out)
    assert sorted(scratch.iterdir()) == sorted([other, made[1]])
    view = cli_main(*shlex.split(command)[1:])
    assert view.returncode == 0, view.stderr
    assert (made[1] / "view.html").read_text().startswith("<!doctype html>")
    # With --out: the dir is the user's, named as given; no note that it goes.
    done = _demo("--out", str(tmp_path / "mine"), tmpdir=scratch)
    assert done.stdout.splitlines()[-1] == f"   modeltap view {tmp_path / 'mine'}"
    assert sorted(scratch.iterdir()) == sorted([other, made[1]])
