"""The snippets of docs/EVIDENCE.md and docs/ASSERTIONS.md run as written.

A real run makes what they read: the refund tool loop of ``test_verdicts``
(the openai SDK through the proxy against the stub), recorded, in
``modeltap-out`` and ``modeltap-record`` of the working directory. Python
blocks run in that directory (a document's blocks in order, in one
namespace, as a reader would type them); the case file and the ``modeltap
check`` line run through the command. (The README's snippets, which read a
``modeltap demo`` run, are run by ``tests/test_readme.py``.)
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from modeltap.report.check import main as check_main
from tests.test_verdicts import recorded_refund_run

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = (ROOT / "docs" / "EVIDENCE.md").read_text()
ASSERTIONS = (ROOT / "docs" / "ASSERTIONS.md").read_text()


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    recorded_refund_run(root / "modeltap-out", root / "modeltap-record")
    return root


def run_python(code: str, namespace: dict[str, object]) -> None:
    exec(compile(code, "<doc>", "exec"), namespace)


def test_evidence_doc_python_runs_in_order(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    snippets = blocks(EVIDENCE, "python")
    assert len(snippets) >= 2 and "Capture.load" in snippets[0] and "Report.load" in snippets[1]
    namespace: dict[str, object] = {}
    for code in snippets:
        run_python(code, namespace)


def test_assertions_doc_python_runs_in_order(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)
    namespace: dict[str, object] = {}
    for code in blocks(ASSERTIONS, "python"):
        run_python(code, namespace)


def test_the_documented_case_file_and_check_line_pass(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workdir)
    (toml,) = blocks(ASSERTIONS, "toml")
    Path("cases.toml").write_text(toml)
    (line,) = [x for x in blocks(ASSERTIONS, "sh")[0].splitlines() if "--junit" in x]
    argv = shlex.split(line)
    assert argv[:2] == ["modeltap", "check"]
    code = check_main(argv[2:])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0] == "[PASS] refund happy path"
    assert Path("junit.xml").exists()
