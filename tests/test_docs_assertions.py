"""The snippets of README's "Reading the evidence" and docs/ASSERTIONS.md run as written.

A real run makes what they read: the refund tool loop of ``test_verdicts``
(the openai SDK through the proxy against the stub), recorded, in
``modeltap-out`` and ``modeltap-record`` of the working directory. Python
blocks run in that directory (a document's blocks in order, in one
namespace, as a reader would type them); the pytest example runs as its own
test file against the stub; the case file and the ``modeltap check`` line run
through the command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from modeltap.report.check import main as check_main
from tests.test_verdicts import recorded_refund_run
from tests.upstream import Upstream, chat_text_json, chat_tool_json

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ASSERTIONS = (ROOT / "docs" / "ASSERTIONS.md").read_text()
#: The README section the verdicts live in (up to its next top-level section).
SECTION = README.split("## Reading the evidence\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    recorded_refund_run(root / "modeltap-out", root / "modeltap-record")
    return root


def run_python(code: str, namespace: dict[str, object]) -> None:
    exec(compile(code, "<doc>", "exec"), namespace)


def test_readme_python_snippets_run(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    snippets = [b for b in blocks(SECTION, "python") if "def test_" not in b]
    assert len(snippets) >= 2 and "capture.expect" in snippets[0]
    for code in snippets:
        run_python(code, {})


def test_readme_pytest_example_runs(pytester: pytest.Pytester, upstream: Upstream) -> None:
    (example,) = [b for b in blocks(SECTION, "python") if "def test_" in b]
    assert "modeltap.expect" in example
    upstream.replies.extend(
        [
            chat_tool_json("gpt-5", name="refund", arguments='{"order": "o-181", "amount": 500}'),
            chat_text_json("gpt-5", text="Your order was refunded."),
        ]
    )
    pytester.makepyfile(test_example=example)
    result = pytester.runpytest_subprocess(
        "-p", "no:hypothesispytest", "--modeltap-upstream", upstream.url
    )
    result.assert_outcomes(passed=1)


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
    (line,) = [x for x in blocks(SECTION, "sh")[0].splitlines() if "--expect" in x]
    argv = shlex.split(line)
    assert argv[:2] == ["modeltap", "check"]
    code = check_main(argv[2:])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0] == "[PASS] refund happy path"
    assert Path("junit.xml").exists()
