"""What each way in installs (issue 28): ``make run`` the runtime dependencies
only, ``make demo`` the openai SDK beside them, ``make test`` the test extras;
and the install line of ``examples/README.md`` works from a clone.

The runtime set is checked by running the CLI where only the runtime
dependencies can be imported: every other installed distribution (the test
extras: the SDKs, pytest, Playwright, chdb, mcp ...) is hidden from the
interpreter by a ``sitecustomize`` that refuses its modules, so an import of
one of them on the way to a running proxy fails the test, as it would in a
venv ``make run`` made.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.cli_process import CliProcess

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------
# The Makefile, as make reads it on a fresh clone


def make_dry_run(tmp_path: Path, target: str) -> list[str]:
    """The commands ``make -n TARGET`` prints in a fresh tree (no .venv yet)."""
    tree = tmp_path / "clone"
    tree.mkdir(exist_ok=True)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tree / name)
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    """What each ``pip install`` of ``commands`` installs (its last word, unquoted),
    pip's own upgrade aside."""
    lines = [c for c in commands if "pip install" in c and "--upgrade pip" not in c]
    return [shlex.split(c)[-1] for c in lines]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(
    ("target", "extras"),
    [("run", "."), ("demo", ".[demo]"), ("test", ".[test]"), ("lint", ".[test]")],
)
def test_each_make_target_installs_its_own_extras(tmp_path: Path, target: str, extras: str) -> None:
    """``make run`` on a fresh clone installs the package without ``[test]`` (it
    installed the test extras before: a 1.5 GB .venv); ``lint`` needs ruff and
    mypy, which ``.ci/run`` gets with the test extras."""
    commands = make_dry_run(tmp_path, target)
    assert commands[1].endswith("-m venv .venv"), commands
    assert installs(commands) == [extras], commands


# --------------------------------------------------------------------------
# The runtime dependencies alone run the CLI


def closure(extras: frozenset[str]) -> set[str]:
    """modeltap's distributions with ``extras``, and all they require, installed here."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("modeltap", extras)]
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), wanted)
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.distribution(name).requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in wanted or {""}):
                continue
            try:
                metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                continue  # a dependency for another platform or Python
            todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen}


def hidden_modules(extras: frozenset[str]) -> list[str]:
    """Top-level modules of installed distributions outside the closure of ``extras``."""
    allowed = closure(extras)
    return sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if module != "modeltap" and not any(canonicalize_name(d) in allowed for d in dists)
    )


SITECUSTOMIZE = """
import sys

HIDDEN = frozenset({hidden!r})


class Hidden:
    '''Refuse the modules of distributions a `make run` venv does not have.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed by make run)")
        return None


sys.meta_path.insert(0, Hidden())
"""


def only(extras: frozenset[str], tmp_path: Path) -> dict[str, str]:
    """An environment whose Python sees only modeltap with ``extras`` installed."""
    site = tmp_path / f"site-{'-'.join(sorted(extras)) or 'runtime'}"
    site.mkdir()
    hidden = hidden_modules(extras)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(hidden=hidden))
    return {**os.environ, "PYTHONPATH": str(site)}


def test_the_runtime_closure_leaves_the_test_extras_out() -> None:
    """The check below is only as good as this split: the heavy test extras are
    outside the runtime set, the proxy's own dependencies inside it."""
    runtime = closure(frozenset())
    assert {"mitmproxy", "opentelemetry-sdk", "orjson", "genai-prices"} <= runtime
    assert not {"openai", "anthropic", "pytest", "playwright", "chdb", "mcp", "boto3"} & runtime
    assert "openai" in closure(frozenset({"demo"}))
    assert {"openai", "playwright"} <= set(hidden_modules(frozenset()))


def test_the_runtime_dependencies_run_the_proxy_and_the_commands(tmp_path: Path) -> None:
    env = only(frozenset(), tmp_path)
    probe = subprocess.run(
        [sys.executable, "-c", "import openai"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "not installed by make run" in probe.stderr  # the hiding works
    with CliProcess("run", "--out", str(tmp_path / "out"), env=env) as cli:
        assert f"OPENAI_BASE_URL={cli.url}/openai/v1" in cli.screen
        assert cli.stop() == 0, "\n".join(cli.lines)
    check = subprocess.run(
        [sys.executable, "-m", "modeltap", "check", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in check.stderr and check.returncode in (0, 1, 2), check.stderr
    demo = subprocess.run(
        [sys.executable, "-m", "modeltap", "demo", "--fast", "--out", str(tmp_path / "demo")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert demo.returncode == 2 and "openai" in demo.stderr, demo.stderr


def test_the_demo_extra_runs_the_demo(tmp_path: Path) -> None:
    demo = subprocess.run(
        [sys.executable, "-m", "modeltap", "demo", "--fast", "--out", str(tmp_path / "demo")],
        env=only(frozenset({"demo"}), tmp_path), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "0 differences" in demo.stdout


# --------------------------------------------------------------------------
# examples/README.md's install line


def test_the_examples_install_line_installs_from_the_clone() -> None:
    """``pip install modeltap`` failed (it is on no index). The line the examples
    give, with the placeholder for the clone filled in, resolves offline: pip
    builds modeltap from the clone (no download: ``--no-build-isolation``)."""
    text = (ROOT / "examples" / "README.md").read_text()
    assert not re.search(r"pip install modeltap\b", text)
    (line,) = [x for x in re.findall(r"```sh\n(.*?)```", text, re.S)[0].splitlines() if "pip" in x]
    words = shlex.split(line, comments=True)
    assert words[:2] == ["pip", "install"] and "/path/to/modeltap" in words, words
    words = [str(ROOT) if w == "/path/to/modeltap" else w for w in words]
    done = subprocess.run(
        [sys.executable, "-m", *words, "--dry-run", "--no-index", "--no-build-isolation"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"Would install .*\bmodeltap-\d", done.stdout), done.stdout
