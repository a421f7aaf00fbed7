"""The control file: private, whole when it appears, never written through another's."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import orjson
import pytest

from modeltap.app import control


def test_the_control_file_appears_whole_and_private(tmp_path: Path) -> None:
    path = control.write_control_file(tmp_path, "run-1", "http://127.0.0.1:1", "tok")
    assert path.name == "control-run-1.json" and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert orjson.loads(path.read_bytes())["token"] == "tok"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (endpoint,) = control.endpoints(tmp_path)
    assert (endpoint.run_id, endpoint.url, endpoint.token) == ("run-1", "http://127.0.0.1:1", "tok")


def test_a_file_already_there_is_never_written_through(tmp_path: Path) -> None:
    planted = tmp_path / "control-run-1.json"
    planted.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        control.write_control_file(tmp_path, "run-1", "http://127.0.0.1:1", "tok")
    assert planted.read_bytes() == b"someone else's"
    assert [p.name for p in tmp_path.iterdir()] == [planted.name]  # no draft left behind
