"""Start-up failures say what failed, in one line: the address and the OS's
reason, the out dir's path and why (issue 15). ``modeltap run``, ``modeltap
replay`` and the pytest fixture, each driven the way a user drives it: a real
process wherever a proxy starts (its whole stderr is the one line), the CLI in
this process for argparse's usage errors."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.rules.errors import StartupError
from tests.cli_process import cli_main, run_cli

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "src" / "modeltap" / "app" / "demo" / "recording"


def only_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        yield busy.getsockname()[1]


def privileged(*cmd: str) -> bool:
    if shutil.which(cmd[0]) is None:
        return False
    return subprocess.run(cmd, capture_output=True, timeout=10, check=False).returncode == 0


@contextlib.contextmanager
def immutable(directory: Path) -> Iterator[Path]:
    """A directory nobody may write in, root included (chmod would not stop root)."""
    directory.mkdir()
    if not privileged("chattr", "+i", str(directory)):
        pytest.skip("chattr +i is not supported here")
    try:
        yield directory
    finally:
        privileged("chattr", "-i", str(directory))


# --------------------------------------------------------------------------
# Listening


def test_a_busy_port_names_the_address_and_the_reason(tmp_path: Path, busy_port: int) -> None:
    done = run_cli("run", "--listen", f"127.0.0.1:{busy_port}", "--out", str(tmp_path))
    assert done.returncode == 1
    assert only_line(done.stderr) == (
        f"modeltap: cannot listen for the proxy on 127.0.0.1:{busy_port}: Address already in "
        "use (another process listens there; pick another port, or 0 for a free one)"
    )


@pytest.mark.parametrize(
    ("listen", "reason"),
    [
        ("nosuchhost.invalid:0", "nosuchhost.invalid:0: the host name does not resolve"),
        # TEST-NET-1: no interface of this machine has it.
        ("192.0.2.1:0", "192.0.2.1:0: Cannot assign requested address (no interface"),
    ],
)
def test_an_address_that_cannot_be_listened_on(tmp_path: Path, listen: str, reason: str) -> None:
    done = run_cli("run", "--listen", listen, "--out", str(tmp_path))
    assert done.returncode == 1
    assert only_line(done.stderr).startswith(f"modeltap: cannot listen for the proxy on {reason}")


def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    done = cli_main("run", "--listen", "127.0.0.1:99999", "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "modeltap run: error: argument --listen: port 99999 in '127.0.0.1:99999' is out of "
        "range (0 to 65535)"
    )


@pytest.mark.parametrize("size", ["12q", "0", "64M", "1.5m", "m"])
def test_a_bad_size_names_the_flag_the_user_typed(tmp_path: Path, size: str) -> None:
    """It said ``modeltap_max_body must be a size``: the addon option, not the flag."""
    done = cli_main("run", "--max-body", size, "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"modeltap run: error: argument --max-body: {size!r} is not a size such as 64m, "
        "512k or 1048576"
    )


def test_the_control_listener_says_the_same(tmp_path: Path) -> None:
    done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(tmp_path), "--control", "x:1")
    assert done.returncode == 1
    assert only_line(done.stderr).startswith(
        "modeltap: cannot listen for the control API on x:1: the host name does not resolve"
    )


def test_replay_names_the_address_too(tmp_path: Path, busy_port: int) -> None:
    done = run_cli(
        "replay", str(RECORDING), "--listen", f"127.0.0.1:{busy_port}", "--out", str(tmp_path)
    )
    assert done.returncode == 2
    assert only_line(done.stderr).startswith(
        f"modeltap replay: cannot listen for the proxy on 127.0.0.1:{busy_port}: "
        "Address already in use"
    )


def test_proxy_start_raises_one_line(tmp_path: Path, busy_port: int) -> None:
    config = ProxyConfig(listen_port=busy_port, out=str(tmp_path), quiet=True)
    with pytest.raises(StartupError) as failed:
        Proxy(config).start()
    assert str(failed.value).startswith(
        f"cannot listen for the proxy on 127.0.0.1:{busy_port}: Address already in use"
    )
    assert isinstance(failed.value, RuntimeError)  # as start() raised before


# --------------------------------------------------------------------------
# The out dir


def test_an_out_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(tmp_path / "file"))
    assert done.returncode == 1
    assert only_line(done.stderr) == (
        f"modeltap: cannot use {tmp_path / 'file'} as the out dir: it is not a directory"
    )
    below = tmp_path / "file" / "out"
    done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(below))
    assert only_line(done.stderr) == (
        f"modeltap: cannot create the out dir {below}: Not a directory"
    )


def test_a_read_only_out_dir_stops_the_start(tmp_path: Path) -> None:
    with immutable(tmp_path / "ro") as out:
        done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(out))
        assert done.returncode == 1
        assert only_line(done.stderr) == (
            f"modeltap: cannot write in the out dir {out}: Operation not permitted"
        )
        done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(out / "sub"))
        assert only_line(done.stderr) == (
            f"modeltap: cannot create the out dir {out / 'sub'}: Operation not permitted"
        )


def test_a_read_only_file_system(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if not privileged("mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mnt)):
        pytest.skip("mount -t tmpfs is not permitted here")
    try:
        done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(mnt))
    finally:
        privileged("umount", "-l", str(mnt))
    assert done.returncode == 1
    assert only_line(done.stderr) == (
        f"modeltap: cannot write in the out dir {mnt}: Read-only file system"
    )


def test_an_audit_file_that_cannot_be_appended_to(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").mkdir()
    done = run_cli("run", "--listen", "127.0.0.1:0", "--out", str(tmp_path))
    assert done.returncode == 1
    assert only_line(done.stderr) == (
        f"modeltap: cannot append to {tmp_path / 'audit.jsonl'}: Is a directory"
    )


# --------------------------------------------------------------------------
# The pytest fixture


def test_the_fixture_says_the_same(pytester: pytest.Pytester, busy_port: int) -> None:
    (pytester.path / "file").write_text("x")
    pytester.makepyfile(
        f"""
        import pytest


        @pytest.mark.modeltap(listen="127.0.0.1:{busy_port}")
        def test_busy(modeltap):
            pass


        @pytest.mark.modeltap(listen="127.0.0.1:99999")
        def test_out_of_range(modeltap):
            pass


        @pytest.mark.modeltap(out="file")
        def test_out_is_a_file(modeltap):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:hypothesispytest")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        [
            f"*modeltap did not start: cannot listen for the proxy on 127.0.0.1:{busy_port}: "
            "Address already in use (another process listens there;*",
            "*modeltap: listen: port 99999 in '127.0.0.1:99999' is out of range (0 to 65535)",
            "*modeltap did not start: cannot use file as the out dir: it is not a directory",
        ]
    )
    assert "did not start: 1" not in result.stdout.str()
