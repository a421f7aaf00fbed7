"""`mitmdump -s addons/modeltap.py` loads the same addon and audits."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import openai
import pytest

from modeltap.app import control
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
    from modeltap.core.run import Run

    run = Run()
    addons = default_addons(run)
    names = [getattr(a, "name", None) for a in addons]
    assert all(n and n.startswith("modeltap_") for n in names) and len(set(names)) == len(names)
    assert all(getattr(a, "run", run) is run for a in addons)


# --------------------------------------------------------------------------
# The recipes of docs/RUNNING.md, run as written (issue 15)

#: Where "With mitmproxy directly" lives (moved from the README, issue 28).
RECIPES_DOC = ROOT / "docs" / "RUNNING.md"


def readme_recipes() -> dict[str, list[str]]:
    """The ``mitmdump -s`` commands of docs/RUNNING.md's "With mitmproxy directly", by mode."""
    text = RECIPES_DOC.read_text()
    section = text.split("## With mitmproxy directly", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    recipes = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:3] == ["mitmdump", "-s", "addons/modeltap.py"] and "--mode" in words:
            recipes[words[words.index("--mode") + 1].split(":", 1)[0]] = words
    return recipes


@contextmanager
def mitmdump(words: list[str], out: Path, *extra: str) -> Iterator[int]:
    """Run a recipe: our mitmdump, this repo's script, a free port, ``out`` for its out dir."""
    port = free_port()
    args = [str(MITMDUMP), "-q", *extra, "-p", str(port)]
    for word in words[1:]:
        word = str(ROOT / word) if word == "addons/modeltap.py" else word
        args.append(f"modeltap_out={out}" if word.startswith("modeltap_out=") else word)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_listening(proc, port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    """Wait (up to 30 s) until ``proc`` accepts connections on ``port``; fail,
    with what it printed, if it exits first."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_the_readme_recipes_listen_on_loopback() -> None:
    recipes = readme_recipes()
    assert set(recipes) == {"reverse", "regular"}
    for words in recipes.values():
        assert words[words.index("--listen-host") + 1] == "127.0.0.1"
        assert not any("modeltap_mode" in word for word in words)


def test_the_readme_options_listing_shows_every_option_with_its_help(tmp_path: Path) -> None:
    """Run as written (our mitmdump first on PATH), it lists each option under its
    help. Without ``--listen-host`` it printed a traceback (mitmproxy's default is
    an open proxy) and ``grep -A3`` showed each option with the *next* one's help."""
    from modeltap.app import options

    section = RECIPES_DOC.read_text().split("## With mitmproxy directly", 1)[1]
    (line,) = [x for x in section.split("```", 2)[1].splitlines() if "--options" in x]
    env = {"PATH": f"{MITMDUMP.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    line = line.replace("addons/modeltap.py", str(ROOT / "addons" / "modeltap.py"))
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {line}"], capture_output=True, text=True, cwd=tmp_path,
        env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    blocks = done.stdout.strip().split("\n\n")
    declared = [o for o in options.OPTIONS if o.mitm_name and o.mitm_name.startswith("modeltap_")]
    assert len(blocks) == len(declared)
    for opt in declared:
        (block,) = [b for b in blocks if b.splitlines()[-1].startswith(f"{opt.mitm_name}:")]
        assert block.startswith("# " + " ".join(opt.help.split()[:3]))


def test_reverse_mode_follows_mitmproxys_reverse_target(upstream: Upstream, tmp_path: Path) -> None:
    words = readme_recipes()["reverse"]
    words = [re.sub(r"^reverse:.*", f"reverse:{upstream.url}", w) for w in words]
    with mitmdump(words, tmp_path) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        client.chat.completions.create(model="via-reverse", messages=[])
    (record,) = read_jsonl(tmp_path / "audit.jsonl")
    assert (record["model"], record["route"], record["upstream"]) == (
        "via-reverse",
        "upstream",
        upstream.url,
    )


def test_regular_mode_needs_no_modeltap_mode(upstream: Upstream, tmp_path: Path) -> None:
    words = readme_recipes()["regular"]
    # The stub is a plain-HTTP provider here: a route makes its host an audited one.
    with mitmdump(words, tmp_path, "--set", f"modeltap_routes=stub={upstream.url}") as port:
        with httpx.Client(proxy=f"http://127.0.0.1:{port}", timeout=10) as client:
            resp = client.post(
                f"{upstream.url}/v1/chat/completions", json={"model": "via-regular", "messages": []}
            )
        assert resp.status_code == 200
    (record,) = read_jsonl(tmp_path / "audit.jsonl")
    assert (record["model"], record["route"]) == ("via-regular", "stub")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--mode", "regular", "--set", "modeltap_mode=reverse"],
            b"modeltap_mode=reverse contradicts mitmproxy's --mode (regular)",
        ),
        (
            ["--mode", "regular", "--mode", "reverse:http://127.0.0.1:9@0"],
            b"mitmproxy's --mode mixes reverse and forwarding listeners",
        ),
    ],
)
def test_a_mode_modeltap_cannot_follow_stops_the_start(
    tmp_path: Path, args: list[str], message: bytes
) -> None:
    proc = subprocess.run(
        [
            str(MITMDUMP), "-s", str(ROOT / "addons" / "modeltap.py"), "--listen-host",
            "127.0.0.1", "-p", str(free_port()), "--set", f"modeltap_out={tmp_path}", *args,
        ],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def test_bare_mitmdump_is_one_line_saying_what_to_set_and_no_listener(tmp_path: Path) -> None:
    """``mitmdump -s addons/modeltap.py`` with no options: mitmproxy's default
    is a regular proxy on every interface, which modeltap refuses. One line
    saying what to set, no traceback, no "listening" line, a non-zero exit."""
    proc = subprocess.run(
        [str(MITMDUMP), "-s", str(ROOT / "addons" / "modeltap.py"), "-p", str(free_port())],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    modeltap = [line for line in said.splitlines() if "modeltap" in line and "Loading" not in line]
    assert len(modeltap) == 1, said
    assert modeltap[0].startswith("modeltap: refusing to start an open proxy")
    assert "set listen_host=127.0.0.1" in modeltap[0]
    for never in ("Traceback", "listening", "Error logged during startup"):
        assert never not in said, said
    assert not list(tmp_path.glob("modeltap-out/*"))  # nothing was started, nothing written
