"""What a user sees when installing modeltap and running its pytest plugin in a
project of their own: no build-backend deprecations, no warnings about code
that is not theirs (issue 15)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def test_building_the_package_prints_no_deprecation(tmp_path: Path) -> None:
    # A copy of what the sdist holds, so the build leaves nothing in the repo.
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src", src / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "deprecated" not in output.lower(), output
    (wheel,) = (tmp_path / "dist").glob("modeltap-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        headers = whl.read(metadata).decode()
    assert "License-Expression: MIT" in headers.splitlines()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_plugin_brings_no_warnings_into_a_users_test_run(pytester: pytest.Pytester) -> None:
    # A project of the user's: none of this repository's filterwarnings apply.
    pytester.makepyfile(
        """
        def test_uses_the_fixture(modeltap):
            assert modeltap.url.startswith("http://127.0.0.1:")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:hypothesispytest", "-W", "default")
    result.assert_outcomes(passed=1)
    assert "Warning" not in result.stdout.str(), result.stdout.str()
