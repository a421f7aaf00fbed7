"""The README as a new user reads it (issue 28): short, every link resolves,
every file of docs/ is linked, and every snippet runs as written, top to
bottom, with no API key and no network.

The blocks run in order in one working directory, with the venv's ``bin``
first on ``PATH`` (what the README's ``. .venv/bin/activate`` does):

- ``sh``: each command (comments dropped, ``\\`` continuations joined).
  ``make TARGET`` is checked with ``make -n`` (the target exists and runs
  what the comment says; what it installs is ``tests/test_install.py``'s);
  ``. .venv/bin/activate`` must put ``modeltap`` and ``mitmdump`` on PATH;
  ``export NAME=VALUE`` must be a line the start-up screen of ``modeltap
  run`` prints for the defaults, and is set for what follows; ``modeltap
  run ...`` starts a proxy, on a free port (the one change made to a
  command: ``--listen 127.0.0.1:0``, since 8787 may be taken), waited for
  until its start-up screen is whole, then stopped with Ctrl-C (exit 0);
  any other ``modeltap ...`` runs to its end and must exit 0.
- ``python``: in one namespace, in that directory, as a reader would type
  them; a block defining a ``test_`` function is a test file, run by pytest
  with no API key in the environment.
- ``text``: output shown: each of its lines (but one naming a temporary
  directory) must be in what a command of the walk printed.

A block after ``<!-- readme-test: illustrative -->`` is not run (it needs an
agent CLI and a key); its URLs must still be the start-up screen's. There
is at most one.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
ILLUSTRATIVE = "<!-- readme-test: illustrative -->"
END_OF_SCREEN = "Ctrl-C stops and flushes."
DEFAULT_PORT = "8787"


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int  # where the block starts in the README (1-based)
    illustrative: bool


def code_blocks(text: str) -> list[Block]:
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        line = text[: m.start()].count("\n") + 1
        found.append(Block(m.group(1), m.group(2), line, before.strip() == ILLUSTRATIVE))
    return found


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block, as words."""
    joined = block.text.replace("\\\n", " ")
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


# --------------------------------------------------------------------------
# Its shape and its links


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_is_the_first_hour() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 350, f"{len(lines)} lines: move reference into docs/"
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make demo" in quick_start
    assert lines.index("## Try it with no API key") < 60
    for heading in ("## Point your agent at it", "## Reading the evidence", "## MCP servers"):
        assert heading in lines
    mcp = text.split("## MCP servers\n", 1)[1].split("\n## ", 1)[0]
    assert "stdio" in mcp and "](docs/MCP.md)" in mcp


def test_every_doc_is_linked_from_the_readme() -> None:
    linked = {target.split("#")[0] for target in links(README)}
    docs = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert docs - linked == set()


@pytest.mark.parametrize(
    "path",
    [README, ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_link_leads_somewhere(path: Path) -> None:
    broken = []
    for target in links(path):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        missing = anchor and dest.suffix == ".md" and anchor not in anchors(dest)
        if not dest.exists() or missing:
            broken.append(target)
    assert broken == []


def test_the_blocks_are_known_and_few_are_illustrative() -> None:
    blocks = code_blocks(README.read_text())
    assert {b.language for b in blocks} <= {"sh", "python", "text"}, blocks
    assert sum(b.illustrative for b in blocks) <= 1
    assert not any(b.illustrative and b.language != "sh" for b in blocks)


# --------------------------------------------------------------------------
# Every snippet, run


def screen_of(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, int]:
    """Start ``modeltap run ARGS`` on a free port, read its start-up screen, Ctrl-C it."""
    argv = [str(BIN / "modeltap"), *args, "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        argv, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.strip() == END_OF_SCREEN:
                done.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = done.wait(60)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait(10)
    reader.join(10)
    screen = "\n".join(lines)
    assert started and END_OF_SCREEN in screen, f"{shlex.join(argv)} did not start:\n{screen}"
    port = re.search(r"listening\s+http://[^:]+:(\d+)", screen)
    assert port, screen
    return screen.replace(f":{port.group(1)}", f":{DEFAULT_PORT}"), code


def in_process(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """``modeltap ARGV`` through the console script's ``main``, in ``cwd`` with
    ``env``: its exit code, and what it printed on stdout and stderr."""
    from modeltap.app import cli

    out = io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(out),
    ):
        patch.chdir(cwd)
        for name in set(os.environ) - set(env):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse's --help and usage errors
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return code, out.getvalue()


def exports(screen: str) -> dict[str, str]:
    return dict(re.findall(r"\b([A-Z][A-Z_]+)=(http://\S+)", screen))


@pytest.fixture(scope="module")
def default_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What ``modeltap run`` with no options tells the user to export (port 8787)."""
    cwd = tmp_path_factory.mktemp("defaults")
    screen, code = screen_of(["run"], cwd, dict(os.environ))
    assert code == 0, screen
    return exports(screen)


def without_keys(env: dict[str, str]) -> dict[str, str]:
    """The user's environment with no API key and no proxy of the machine's."""
    drop = re.compile(r".*(API_KEY|_TOKEN)$|(?i:https?_proxy|all_proxy)$")
    return {k: v for k, v in env.items() if not drop.match(k)}


class Reader:
    """Runs the README's blocks in order, as the module documentation says."""

    def __init__(self, cwd: Path, default_exports: dict[str, str]) -> None:
        self.cwd = cwd
        self.default_exports = default_exports
        self.env = without_keys(dict(os.environ))
        self.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.namespace: dict[str, object] = {}
        self.ran: list[str] = []
        self.printed: list[str] = []

    def sh(self, block: Block) -> None:
        for words in commands(block):
            where = f"README line {block.line}: {shlex.join(words)}"
            if words[0] == "make":
                self.make(words, where)
            elif words[:2] == [".", ".venv/bin/activate"]:
                self.activate(where)
            elif words[0] == "export":
                for assignment in words[1:]:
                    name, _, value = assignment.partition("=")
                    assert self.default_exports.get(name) == value, (where, self.default_exports)
                    self.env[name] = value
            elif words[0] == "modeltap":
                self.modeltap(words, where)
            else:
                raise AssertionError(f"{where}: no way to run {words[0]!r} here")
            self.ran.append(shlex.join(words))

    def make(self, words: list[str], where: str) -> None:
        target = words[1]
        done = subprocess.run(
            # --no-print-directory: under `make test` the inner make is a sub-make,
            # which would print "Entering directory" lines around its commands.
            ["make", "--no-print-directory", "-n", *words[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{where}: {done.stderr}"
        last = done.stdout.strip().splitlines()[-1]
        expected = {"test": "-m pytest", "run": "modeltap run", "demo": "modeltap demo"}[target]
        assert expected in last, f"{where}: make -n ends with {last!r}"

    def activate(self, where: str) -> None:
        venv = ROOT / ".venv" if (ROOT / ".venv" / "bin" / "activate").exists() else BIN.parent
        done = subprocess.run(
            ["bash", "-c", f". {venv}/bin/activate && command -v modeltap mitmdump"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{where}: {done.stdout}{done.stderr}"
        assert [Path(p).name for p in done.stdout.split()] == ["modeltap", "mitmdump"]
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"

    def modeltap(self, words: list[str], where: str) -> None:
        assert self.env["PATH"].startswith(str(BIN)), f"{where}: modeltap is not on PATH yet"
        if words[1] == "run" and "--help" not in words:
            screen, code = screen_of(words[1:], self.cwd, self.env)
            self.printed.append(screen)
            assert code == 0, f"{where}:\n{screen}"
            return
        # The console script's main, called here: a process would only add its
        # start (seconds of imports) to each of these commands, which all end.
        code, out = in_process(words[1:], self.cwd, self.env)
        self.printed.append(out)
        assert code == 0, f"{where}: exit {code}\n{out}"
        assert "Traceback" not in out, f"{where}: {out}"

    def python(self, block: Block) -> None:
        if re.search(r"^def test_", block.text, flags=re.M):
            self.pytest_file(block)
            return
        here = Path.cwd()
        os.chdir(self.cwd)
        try:
            exec(compile(block.text, f"README.md line {block.line}", "exec"), self.namespace)
        finally:
            os.chdir(here)
        self.ran.append(f"python block of line {block.line}")

    def pytest_file(self, block: Block) -> None:
        tests = self.cwd / "user_tests"
        tests.mkdir()
        (tests / "test_readme_example.py").write_text(block.text)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
            cwd=tests, env=self.env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"README line {block.line}:\n{done.stdout}{done.stderr}"
        assert re.search(r"\b1 passed\b", done.stdout), done.stdout
        self.ran.append(f"pytest file of line {block.line}")

    def illustrative(self, block: Block) -> None:
        for words in commands(block):
            assert words[0] in {"claude", "codex", "gemini"}, words
            for url in re.findall(r"http://\S+", " ".join(words)):
                assert url in self.default_exports.values(), (url, self.default_exports)


@pytest.fixture
def reader(tmp_path: Path, default_exports: dict[str, str]) -> Iterator[Reader]:
    yield Reader(tmp_path, default_exports)


def test_every_readme_snippet_runs_as_written(reader: Reader) -> None:
    blocks = code_blocks(README.read_text())
    for block in blocks:
        if block.illustrative:
            reader.illustrative(block)
        elif block.language == "sh":
            reader.sh(block)
        elif block.language == "python":
            reader.python(block)
    printed = "\n".join(reader.printed)
    # A URL of the proxy the prose names (not a pattern like /NAME/...) is one
    # that a start-up screen of the walk printed.
    prose = re.sub(r"^```.*?^```$", "", README.read_text(), flags=re.S | re.M)
    for url in re.findall(rf"http://127\.0\.0\.1:{DEFAULT_PORT}/[a-z][\w/.-]*", prose):
        assert url in printed or url in reader.default_exports.values(), url
    for block in blocks:
        if block.language == "text":
            shown = [x for x in block.text.splitlines() if x.strip() and "/tmp/" not in x]
            assert shown and [x for x in shown if x not in printed] == [], f"line {block.line}"
    # What a first hour goes through, each at least once.
    ran = "\n".join(reader.ran)
    for step in (
        "make run", "make test", "make demo", "modeltap demo --out modeltap-out",
        "modeltap report modeltap-out", "modeltap check modeltap-out", "modeltap view",
        "modeltap run --mcp", "pytest file",
    ):  # fmt: skip
        assert step in ran, ran
