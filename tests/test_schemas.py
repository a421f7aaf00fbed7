"""The shipped JSON Schemas: generated from records.py, never edited, as strict as the writer.

``audit_record``, ``event`` and ``session`` are generated
(:mod:`modeltap.evidence.schemas`); ``report`` is written by hand, and what it
shares with the records is checked here so it cannot drift either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING
from importlib import resources
from typing import Any

import jsonschema
import orjson
import pytest

from modeltap.core.sessions import Sessions
from modeltap.evidence import records, schemas
from modeltap.evidence.capture.lines import decode_event, decode_record, decode_session_end
from tests.factories import (
    AUDIT_SCHEMA,
    EVENT_SCHEMA,
    SESSION_SCHEMA,
    audit_record,
    response_event,
    schema,
)

GENERATED = schemas.generated()
REPORT = "report.schema.json"
#: The JSON of `modeltap check --expect --json` (modeltap.report.case_report).
VERDICTS = "verdicts.schema.json"
#: Schemas in src/modeltap/schemas/ that no type generates.
HAND_WRITTEN = (REPORT, VERDICTS)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_the_committed_schema_is_the_generated_one(name: str) -> None:
    assert schemas.shipped(name) == GENERATED[name], (
        f"src/modeltap/schemas/{name} differs from the records it describes: "
        "run `python scripts/make_schemas.py` and commit the result"
    )


def test_no_other_schema_is_shipped() -> None:
    """A schema whose record went away is not left behind; a new one is
    generated (modeltap.evidence.schemas) or listed in HAND_WRITTEN."""
    shipped = resources.files("modeltap").joinpath(schemas.PACKAGE_DIR).iterdir()
    assert sorted(p.name for p in shipped if p.name.endswith(".json")) == sorted(
        [*GENERATED, *HAND_WRITTEN]
    )


@pytest.mark.parametrize("name", sorted([*GENERATED, *HAND_WRITTEN]))
def test_every_shipped_schema_is_valid_draft_2020_12(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema(name))


def _objects(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [o for item in value for o in _objects(item)]
    if not isinstance(value, dict):
        return []
    found = [value] if "properties" in value else []
    return found + [o for child in value.values() for o in _objects(child)]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_every_object_is_closed_and_every_field_required(name: str) -> None:
    """to_json_line writes every field of the dataclass and nothing else."""
    objects = _objects(schema(name))
    assert objects
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])


def _closed() -> records.SessionStatus:
    """A session's status as the core writes it (a session that saw nothing)."""
    sessions = Sessions("run-1")
    sessions.get("s-1")
    return sessions.close("s-1")


@pytest.mark.parametrize(
    ("written", "validator", "decode"),
    [
        (audit_record(), AUDIT_SCHEMA, decode_record),
        (response_event(), EVENT_SCHEMA, decode_event),
        (_closed(), SESSION_SCHEMA, decode_session_end),
    ],
    ids=["audit", "event", "session"],
)
def test_a_field_with_a_default_is_required_when_written_and_optional_when_read(
    written: Any, validator: jsonschema.Draft202012Validator, decode: Callable[[Any], Any]
) -> None:
    """Adding a field is one edit in records.py: given a default, the schema
    requires it and a line an older modeltap wrote without it reads as that default."""
    line = orjson.loads(records.to_json_line(written))
    validator.validate(line)
    later = [f for f in dataclasses.fields(written) if f.init and f.default is not MISSING]
    assert later  # today: model_source, operation, ...; cost, ...; message, ...
    required = _required(validator.schema, type(written).__name__)
    for f in later:
        assert f.name in required
        older = decode({k: v for k, v in line.items() if k != f.name})
        assert getattr(older, f.name) == f.default, f.name
        assert not validator.is_valid({k: v for k, v in line.items() if k != f.name})


def _required(schema: dict[str, Any], name: str) -> list[str]:
    """The required fields of a record's object in its file's schema."""
    found: list[str] = (
        schema["$defs"][name]["required"] if "oneOf" in schema else schema["required"]
    )
    return found


def test_fields_only_older_lines_leave_null_are_never_null_in_the_schema() -> None:
    record = orjson.loads(records.to_json_line(audit_record()))
    AUDIT_SCHEMA.validate(record)
    for name in ("model_source", "operation", "provider"):
        assert not AUDIT_SCHEMA.is_valid({**record, name: None}), name
    for name in ("route", "reasoning_effort", "instructions_sha256", "instructions_parts"):
        assert AUDIT_SCHEMA.is_valid({**record, name: None}), name  # null: not sent, or none
    assert not AUDIT_SCHEMA.is_valid({**record, "transport": "carrier-pigeon"})
    assert not AUDIT_SCHEMA.is_valid({**record, "omitted_settings": ["tools", "tools"]})
    assert not AUDIT_SCHEMA.is_valid({**record, "omitted_settings": ["temperature"]})
    assert not AUDIT_SCHEMA.is_valid({**record, "body_sha256": "F" * 64})


def test_each_event_kind_is_its_own_constant() -> None:
    event = orjson.loads(records.to_json_line(response_event()))
    EVENT_SCHEMA.validate(event)
    assert not EVENT_SCHEMA.is_valid({**event, "kind": "rejected"})
    kinds = [
        EVENT_SCHEMA.schema["$defs"][t.__name__]["properties"]["kind"] for t in records.EVENT_TYPES
    ]
    assert kinds == [{"const": records.kind_of(t)} for t in records.EVENT_TYPES]


def _session_line() -> dict[str, Any]:
    line: dict[str, Any] = orjson.loads(records.to_json_line(_closed()))
    return line


def test_a_session_line_the_core_writes_is_valid_and_reads_back() -> None:
    status = _closed()
    line = orjson.loads(records.to_json_line(status))
    SESSION_SCHEMA.validate(line)
    assert line["stop_reason"] == "completed"
    assert decode_session_end(line) == status


def test_the_session_schema_refuses_what_the_writer_never_writes() -> None:
    line = _session_line()
    assert SESSION_SCHEMA.schema["properties"]["stop_reason"]["enum"] == list(records.STOP_REASONS)
    assert not SESSION_SCHEMA.is_valid({**line, "stop_reason": "finished"})
    for name in ("stop_reason", "requests_audited", "refusals", "evidence_complete"):
        assert not SESSION_SCHEMA.is_valid({**line, name: None}), name
    assert not SESSION_SCHEMA.is_valid({**line, "requests_audited": -1})
    assert not SESSION_SCHEMA.is_valid({**line, "verdict": "pass"})
    assert SESSION_SCHEMA.is_valid({**line, "otlp_logs_dropped": 3})


def test_the_hand_written_report_schema_uses_the_records_vocabulary() -> None:
    """report.py copies usage counts and costs from the records: the report's
    schema names the same fields, so a field added to one is added to the other."""
    report = schema(REPORT)["$defs"]
    usage = list(report["token_usage"]["properties"])
    assert usage == [*records.USAGE_COUNTS, "total_summed"]
    assert list(report["cost"]["properties"]) == [f.name for f in dataclasses.fields(records.Cost)]
    turn = report["turn"]["properties"]
    assert turn["operation"]["enum"] == [*records.OPERATIONS, None]
    assert turn["model_source"]["enum"] == [*records.MODEL_SOURCES, None]
