"""``modeltap check DIR --expect CASES.toml``: cases judged on real traffic, text,
``--json`` (validated against ``verdicts.schema.json``), ``--junit`` and the exit codes.

The capture is a refund tool loop driven by the openai SDK through the proxy
against the stub (``tests.test_verdicts.refund_loop``), recorded; a second
capture is the same loop whose last request never got its answer.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import orjson
import pytest

from modeltap.evidence.verdicts.cases import CaseFileError, parse_cases
from modeltap.report.check import main
from tests.factories import schema
from tests.test_verdicts import recorded_refund_run

VERDICTS_SCHEMA = jsonschema.Draft202012Validator(schema("verdicts.schema.json"))


@pytest.fixture(scope="module")
def refund_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(out dir, record dir) of a complete, recorded refund loop in session refund-1."""
    root = tmp_path_factory.mktemp("refund")
    recorded_refund_run(root / "out", root / "record")
    yield root / "out", root / "record"


def cases(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.toml"
    path.write_text(text)
    return path


def check(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


MIXED = """
[[case]]
name = "refund happy path"
session = "refund-1"
expect_tools = ["lookup", "refund"]
forbid_tools = ["delete_account"]
max_tool_calls = 2
models = ["gpt-5"]
completed = true

[[case.tool_called]]
name = "refund"
args = { amount = 500, order = { regex = "^o-" }, note = { fuzzy = "181001 points" } }

[[case]]
name = "no second refund"
max_tool_calls = 1

[[case]]
name = "says refunded"
expect_text = "refunded"
"""


def test_text_report_and_exit_status(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = refund_run
    code, text, _ = check(capsys, out, "--expect", cases(tmp_path, MIXED))
    assert code == 1
    lines = text.splitlines()
    assert lines[0] == "[PASS] refund happy path"
    assert lines[1] == "[FAIL] no second refund"
    assert lines[2] == (
        "       - failed: max_tool_calls(1): 2 tool calls seen, more than the 1 allowed"
    )
    # Without --record the final text is content nobody kept: unavailable, never a pass.
    assert lines[3] == "[UNAVAILABLE] says refunded"
    assert lines[4].startswith(
        "       - unavailable: final_text_contains('refunded'): the final text (turn 3) was "
        "not read; the messages channel is unavailable: message content is not recorded"
    )
    assert lines[-1] == "1/3 passed, 1 failed, 1 unavailable"


def test_with_the_recording_the_final_text_is_judged(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, record = refund_run
    path = cases(tmp_path, '[[case]]\nname = "says refunded"\nexpect_text = "REFUNDED"\n')
    code, text, _ = check(capsys, out, "--expect", path, "--record", record)
    assert (code, text.splitlines()[0]) == (0, "[PASS] says refunded")
    path = cases(tmp_path, '[[case]]\nname = "says sorry"\nexpect_text = "sorry"\n')
    code, text, _ = check(capsys, out, "--expect", path, "--record", record)
    assert code == 1
    assert "it says 'Your order o-181 was refunded.'" in text


def test_an_optional_gap_passes_and_is_still_listed(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = refund_run
    path = cases(
        tmp_path,
        '[[case]]\nname = "refund"\nexpect_tools = ["refund"]\nexpect_text = "refunded"\n'
        'optional = ["expect_text"]\n',
    )
    code, text, _ = check(capsys, out, "--expect", path, "--junit", tmp_path / "j" / "junit.xml")
    assert code == 0
    assert text.splitlines()[:2] == [
        "[PASS] refund",
        "       - unavailable (optional): final_text_contains('refunded'): the final text "
        "(turn 3) was not read; the messages channel is unavailable: message content is not "
        "recorded (names, counts and hashes only)",
    ]
    suite = ET.parse(tmp_path / "j" / "junit.xml").getroot()
    (case,) = suite.iter("testcase")
    assert [child.tag for child in case] == ["skipped", "system-out"]
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"


def test_junit_has_a_testcase_per_case_with_failure_and_error(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = refund_run
    junit = tmp_path / "junit.xml"
    code, _, _ = check(capsys, out, "--expect", cases(tmp_path, MIXED), "--junit", junit)
    assert code == 1
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    by_name = {case.get("name"): case for case in suite.iter("testcase")}
    assert list(by_name) == ["refund happy path", "no second refund", "says refunded"]
    assert [c.tag for c in by_name["refund happy path"]] == ["system-out"]
    (failure,) = by_name["no second refund"].iter("failure")
    assert failure.get("type") == "failed"
    assert failure.get("message") == "max_tool_calls(1): failed"
    assert "2 tool calls seen, more than the 1 allowed" in (failure.text or "")
    (error,) = by_name["says refunded"].iter("error")
    assert error.get("type") == "unavailable"
    assert "It becomes available with the run recorded with `modeltap run --record RDIR`" in (
        error.text or ""
    )


def test_json_follows_its_schema(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = refund_run
    code, text, _ = check(capsys, out, "--expect", cases(tmp_path, MIXED), "--json")
    assert code == 1
    document = orjson.loads(text)
    VERDICTS_SCHEMA.validate(document)
    assert document["summary"] == {"cases": 3, "passed": 1, "failed": 1, "unavailable": 1}
    happy = document["cases"][0]
    assert (happy["session"], happy["scope"], happy["status"]) == (
        "refund-1",
        "session refund-1",
        "passed",
    )
    (called,) = [v for v in happy["verdicts"] if v["name"].startswith("tool_called")]
    assert called["details"] == [
        {
            "expected_tool": "refund",
            "args_asserted": {
                "amount": 500,
                "order": {"regex": "^o-"},
                "note": {"fuzzy": "181001 points"},
            },
            "matched_call_index": 1,
            "unmatched_reason": None,
        }
    ]


def test_the_schema_holds_unavailable_verdicts_to_saying_why(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every unavailable verdict names its channel, why, and what would make it
    available, and an unmatched call says why: the schema refuses a document that
    does not, so a consumer can rely on it."""
    out, _ = refund_run
    _, text, _ = check(capsys, out, "--expect", cases(tmp_path, MIXED), "--json")
    document = orjson.loads(text)
    VERDICTS_SCHEMA.validate(document)
    (gap,) = document["cases"][2]["verdicts"]
    assert gap["status"] == "unavailable"
    for field in ("hint", "channel", "reason"):
        broken = orjson.loads(text)
        broken["cases"][2]["verdicts"][0][field] = None
        assert not VERDICTS_SCHEMA.is_valid(broken), field
    (called,) = [v for v in document["cases"][0]["verdicts"] if v["details"]]
    called["details"][0]["matched_call_index"] = -1
    assert not VERDICTS_SCHEMA.is_valid(document)


def test_a_session_not_in_the_capture_is_unavailable_naming_the_sessions(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = refund_run
    path = cases(tmp_path, '[[case]]\nname = "other"\nsession = "nope"\nforbid_tools = ["x"]\n')
    code, text, _ = check(capsys, out, "--expect", path)
    assert code == 1
    assert text.splitlines()[0] == "[UNAVAILABLE] other"
    assert "no such session 'nope' in this out dir (sessions: refund-1)" in text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[[case]]\nname = "a"\nexpect_tools = ["x"]\nmax_tool_call = 3\n',
            "cases.toml line 4: key 'max_tool_call': unknown key",
        ),
        (
            '[[case]]\nname = "a"\ncompleted = true\n\n'
            '[[case]]\nname = "b"\nmax_tool_calls = "3"\n',
            "cases.toml line 7: key 'max_tool_calls': must be a whole number",
        ),
        (
            '[[case]]\nname = "a"\nforbid_tools = "x"\n',
            "cases.toml line 3: key 'forbid_tools': must be a list",
        ),
        (
            '[[case]]\nname = "a"\nexpect_tools = ["x"]\noptional = ["expect_text"]\n',
            "cases.toml line 4: key 'optional': names 'expect_text', which this case does not "
            "judge",
        ),
        (
            '[[case]]\nname = "a"\n\n[[case.tool_called]]\nname = "refund"\n'
            'args = { id = { regex = "(" } }\n',
            "cases.toml line 6: key 'tool_called.args': args.id: regex() pattern does not compile",
        ),
        (
            '[[case]]\nname = "a"\n\n[[case.tool_called]]\nname = "r"\n'
            "args = { x = { anything = 1 } }\n",
            "key 'tool_called.args': args.x: write { anything = true }",
        ),
        (
            '[[case]]\nname = "a"\nexpect_tools = ["x"]\n'
            '[[case]]\nname = "a"\nexpect_tools = ["y"]\n',
            "cases.toml line 5: key 'name': a second case with this name",
        ),
        ('[[case]]\nname = "a"\n', "cases.toml line 1: case 'a' asks nothing"),
        (
            '[[case]]\nexpect_tools = ["x"]\n',
            "cases.toml line 1: key 'name': every case needs a name",
        ),
        ('title = "x"\n', "cases.toml line 1: key 'title': unknown top-level key"),
        ("", "cases.toml: no [[case]] table"),
        (
            '[[case]]\nname = "a"\nmax_cost_usd = nan\n',
            "cases.toml line 3: key 'max_cost_usd': must be a number of US dollars",
        ),
        (
            '[[case]]\nname = "a"\n\n[[case.tool_called]]\nname = "r"\nargs = { x = [1, nan] }\n',
            "cases.toml line 6: key 'tool_called.args': args.x[1]: nan is no JSON value",
        ),
        (
            '[[case]]\nname = "a"\n\n[[case.tool_called]]\nname = "r"\n'
            "args = { x = { approx = 1, rel = nan } }\n",
            "key 'tool_called.args': args.x: approx() tolerances must be numbers",
        ),
        (
            '[[case]]\nname = "a"\n\n[[case.tool_called]]\n\nname = 5\n',
            "cases.toml line 6: key 'tool_called.name': needs a name",
        ),
        ('[[case]]\nname = "a\n', "cases.toml line 2: not valid TOML"),
    ],
)
def test_a_case_file_that_cannot_be_read_exits_2_naming_line_and_key(
    refund_run: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    said: str,
) -> None:
    out, _ = refund_run
    path = cases(tmp_path, text)
    code, stdout, err = check(capsys, out, "--expect", path)
    assert code == 2 and stdout == ""
    assert said.replace("cases.toml", str(path)) in err, err


def test_other_ways_to_exit_2(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = refund_run
    good = cases(tmp_path, '[[case]]\nname = "a"\nexpect_tools = ["lookup"]\n')
    code, _, err = check(capsys, out, "--expect", tmp_path / "missing.toml")
    assert code == 2 and "cannot be read" in err
    code, _, err = check(capsys, tmp_path / "no-such-dir", "--expect", good)
    assert code == 2 and "no such directory" in err
    code, _, err = check(capsys, out, "--expect", good, "--record", out)
    assert code == 2 and "is a capture (a run's --out), not a recording" in err
    code, _, err = check(capsys, out, "--json")
    assert code == 2 and "give --expect" in err


def test_cases_parse_matchers_and_literals() -> None:
    (case,) = parse_cases(
        '[[case]]\nname = "m"\n[[case.tool_called]]\nname = "t"\n'
        'args = { a = { equals = { regex = "x" } }, b = { one_of = [1, { fuzzy = "2,000" }] },'
        ' c = { contains = { id = { regex = "^o-" } } }, d = { approx = 1.5 },'
        " e = [1, { anything = true }] }\n"
    )
    assert [key for key, _ in case.checks] == ["tool_called"]
    with pytest.raises(CaseFileError) as caught:
        parse_cases('[[case]]\nname = "m"\nmax_cost_usd = -1\n', "f.toml")
    assert (caught.value.line, caught.value.key) == (3, "max_cost_usd")


def test_approx_with_its_tolerances_is_a_matcher_as_the_json_writes_it(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A verdict's JSON writes approx(504, rel=0.01) as {approx, rel, abs}; a case
    file reads that table back as the same matcher, not as a literal table."""
    out, _ = refund_run
    path = cases(
        tmp_path,
        '[[case]]\nname = "near"\n[[case.tool_called]]\nname = "refund"\n'
        "args = { amount = { approx = 504, rel = 0.01, abs = 0.0 } }\n",
    )
    code, text, _ = check(capsys, out, "--expect", path, "--json")
    assert code == 0, text
    (verdict,) = orjson.loads(text)["cases"][0]["verdicts"]
    assert verdict["details"][0]["args_asserted"] == {
        "amount": {"approx": 504, "rel": 0.01, "abs": 0.0}
    }
    (case,) = parse_cases(
        '[[case]]\nname = "x"\n[[case.tool_called]]\nname = "r"\n'
        "args = { a = { approx = 1, rel = 0.5, other = 1 } }\n"
    )
    assert case.checks  # three keys, one not approx's: a literal table


def test_optional_keys_do_not_excuse_a_missing_session(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """optional excuses a channel the capture could not fill, not a session name
    that matches nothing (a typo would otherwise pass the case)."""
    out, _ = refund_run
    path = cases(
        tmp_path,
        '[[case]]\nname = "typo"\nsession = "refund-l"\nforbid_tools = ["delete_account"]\n'
        'optional = ["forbid_tools"]\n',
    )
    code, text, _ = check(capsys, out, "--expect", path)
    assert code == 1, text
    assert text.splitlines()[0] == "[UNAVAILABLE] typo"
    assert "no such session 'refund-l' in this out dir (sessions: refund-1)" in text


def test_a_case_file_saved_with_a_byte_order_mark_is_read(
    refund_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Windows editors save UTF-8 with a BOM; tomllib would call line 1 invalid TOML."""
    out, _ = refund_run
    path = tmp_path / "bom.toml"
    path.write_bytes(b'\xef\xbb\xbf[[case]]\nname = "a"\nexpect_tools = ["lookup"]\n')
    code, text, err = check(capsys, out, "--expect", path)
    assert (code, err) == (0, ""), err
    assert text.splitlines()[0] == "[PASS] a"
