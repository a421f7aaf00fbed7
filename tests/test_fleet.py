"""docker/fleet: the Collector configuration, the compose file, and the queries of docs/FLEET.md.

No Docker engine and no Collector binary run here, so the checks are:

- the Collector configuration against ``collector.schema.json`` (written from
  the components' documented configuration), plus what a schema cannot say:
  every component a pipeline names is defined, every defined one is used,
  storage names a ``file_storage`` extension the service runs; and the schema
  itself must refuse the mistakes it exists for;
- the file path's rows carry the attribute names the OTLP path's do (the
  queries read those names);
- the three queries, run by the real ClickHouse engine (chDB, in process) on
  the clickhouse exporter's own ``otel_logs`` table, filled with the log
  records two proxies really exported, each row twice (as when both the OTLP
  and the file path feed the table): their answers must be what the local
  JSONL files say.
"""

from __future__ import annotations

import collections
import copy
import datetime
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import orjson
import pytest
import yaml

from modeltap.telemetry.logs import log_attributes
from tests.conftest import Running, read_jsonl
from tests.factories import audit_record, response_event
from tests.otlp_receiver import HttpReceiver, ReceivedLog

ROOT = Path(__file__).resolve().parent.parent
FLEET = ROOT / "docker" / "fleet"
QUERIES = FLEET / "queries"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    config: dict[str, Any] = load_yaml(FLEET / "collector.yaml")
    return config


@pytest.fixture(scope="module")
def schema() -> jsonschema.Draft202012Validator:
    value = json.loads((FLEET / "collector.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(value)
    return jsonschema.Draft202012Validator(value)


# --------------------------------------------------------------------------
# The Collector configuration


def test_the_collector_config_follows_the_documented_structure(
    collector: dict[str, Any], schema: jsonschema.Draft202012Validator
) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in schema.iter_errors(collector)]
    assert errors == []


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (["receivers", "file_log/modeltap", "start_at"], "begining"),
        (["receivers", "file_log/modeltap", "includes"], ["/x"]),
        (["receivers", "file_log/modeltap", "poll_interval"], "200 ms"),
        (["receivers", "file_log/modeltap", "operators", 0, "type"], "json_parse"),
        (["receivers", "file_log/modeltap", "operators", 0, "on_error"], "ignore"),
        (["exporters", "clickhouse", "sending_queue", "sizer"], "rows"),
        (["exporters", "clickhouse", "retry_on_failure", "max_elapsed"], "5m"),
        (["exporters", "clickhouse/files", "ttl"], "90 days"),
        (["processors", "memory_limiter", "limit_percentage"], 180),
        (["processors", "transform/file_log", "log_statements", 0, "context"], "record"),
        (["exporters", "otlphttp/jaeger"], {"endpoint": "http://jaeger:4318"}),
        (["service", "pipelines", "events"], {"receivers": ["otlp"], "exporters": ["clickhouse"]}),
    ],
)
def test_the_schema_refuses_what_the_collector_would(
    collector: dict[str, Any], schema: jsonschema.Draft202012Validator, where: list[Any], value: Any
) -> None:
    broken = copy.deepcopy(collector)
    node = broken
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    assert list(schema.iter_errors(broken)), f"the schema let {where} = {value!r} through"


def test_every_reference_between_components_resolves(collector: dict[str, Any]) -> None:
    service = collector["service"]
    used: dict[str, set[str]] = collections.defaultdict(set)
    for name, pipeline in service["pipelines"].items():
        signal = name.split("/")[0]
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in collector[kind], f"{name} uses undefined {component}"
                used[kind].add(component)
        if signal == "logs":
            assert "batch" not in pipeline.get("processors", []) or "file_log" not in str(
                pipeline["receivers"]
            ), "a batch processor acks lines before they are stored: not on the file path"
    for kind in ("receivers", "processors", "exporters"):
        assert set(collector[kind]) == used[kind], f"{kind} defined but never used"
    extensions = set(service["extensions"])
    assert extensions == set(collector["extensions"])
    storages = {name for name in extensions if name.split("/")[0] == "file_storage"}
    file_log = collector["receivers"]["file_log/modeltap"]
    assert file_log["storage"] in storages
    files_queue = collector["exporters"]["clickhouse/files"]["sending_queue"]
    assert files_queue["storage"] in storages
    assert file_log["storage"] != files_queue["storage"]
    # At least once: the file path never gives up on a line.
    assert file_log["retry_on_failure"] == file_log["retry_on_failure"] | {
        "enabled": True,
        "max_elapsed_time": "0s",
    }
    assert (
        collector["exporters"]["clickhouse/files"]["retry_on_failure"]["max_elapsed_time"] == "0s"
    )


def test_the_compose_file_wires_the_proxies_to_the_collector(collector: dict[str, Any]) -> None:
    compose = load_yaml(FLEET / "compose.yaml")
    services = compose["services"]
    jobs = {name: s for name, s in services.items() if name.startswith("job-")}
    assert len(jobs) >= 3
    collector_service = services["otel-collector"]
    assert collector_service["image"].startswith("otel/opentelemetry-collector-contrib:")
    mounts = dict(volume.split(":")[:2] for volume in collector_service["volumes"])
    assert mounts["./collector.yaml"] == "/etc/otelcol-contrib/config.yaml"
    tailed = mounts["./out"]
    include = collector["receivers"]["file_log/modeltap"]["include"]
    for name, job in jobs.items():
        env = job["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
        assert f"service.instance.id={name}" in env["OTEL_RESOURCE_ATTRIBUTES"]
        (volume,) = job["volumes"]
        host, inside = volume.split(":")
        assert inside == job["command"][job["command"].index("--out") + 1]
        # Its files are where the Collector's file_log looks.
        for file in ("audit.jsonl", "events.jsonl", "sessions.jsonl"):
            seen_as = f"{tailed}/{Path(host).relative_to('./out')}/{file}"
            assert any(re.fullmatch(p.replace("*", "[^/]+"), seen_as) for p in include)
    # Every published port is on the loopback interface.
    for service in services.values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:")


def test_the_file_path_sets_the_names_the_otlp_path_sets(collector: dict[str, Any]) -> None:
    statements = collector["processors"]["transform/file_log"]["log_statements"][0]["statements"]
    set_by_file_path = set(re.findall(r'set\(log\.attributes\["([^"]+)"\]', " ".join(statements)))
    set_by_file_path |= {"log.file.name"}  # the receiver's include_file_name
    event = collector["processors"]["transform/event_name"]["log_statements"][0]["statements"]
    assert any('log.attributes["otel.event.name"]' in s for s in event)
    names = set(log_attributes("audit.jsonl", b"{}", audit_record()))
    names |= set(log_attributes("events.jsonl", b"{}", response_event()))
    # What the queries of docs/FLEET.md read is on both paths.
    read_by_queries = set(
        re.findall(
            r"LogAttributes\['([^']+)'\]", "".join(p.read_text() for p in QUERIES.glob("*.sql"))
        )
    )
    assert read_by_queries <= names & set_by_file_path
    # And every other name the file path sets means the same as on the OTLP path.
    assert set_by_file_path - {"otel.event.name"} <= names | {"error.type"}


# --------------------------------------------------------------------------
# The queries, on the exporter's own table


def as_string(value: Any) -> str:
    """pcommon.Value.AsString(), as the exporter writes attribute values."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def exporter_row(log: ReceivedLog) -> dict[str, Any]:
    """The row the clickhouse exporter inserts for one log record."""
    moment = datetime.datetime.fromtimestamp(log.time_ns // 10**9, tz=datetime.UTC)
    return {
        "Timestamp": f"{moment:%Y-%m-%d %H:%M:%S}.{log.time_ns % 10**9:09d}",
        "TraceId": log.trace_id or "",
        "SpanId": log.span_id or "",
        "TraceFlags": 0,
        "SeverityText": log.severity_text,
        "SeverityNumber": log.severity_number,
        "ServiceName": log.resource.get("service.name", ""),
        "Body": log.body,
        "ResourceSchemaUrl": "",
        "ResourceAttributes": {k: as_string(v) for k, v in log.resource.items()},
        "ScopeSchemaUrl": "",
        "ScopeName": log.scope,
        "ScopeVersion": "",
        "ScopeAttributes": {},
        "LogAttributes": {k: as_string(v) for k, v in log.attributes.items()},
    }


class ClickHouse:
    """The ClickHouse engine in this process, with the exporter's otel_logs table."""

    def __init__(self, path: Path) -> None:
        from chdb import session

        self.session = session.Session(str(path))
        self.session.query("SET session_timezone = 'UTC'")
        self.session.query("CREATE DATABASE IF NOT EXISTS otel")
        ddl = (ROOT / "tests" / "data" / "fleet" / "otel_logs.sql").read_text()
        self.session.query(
            "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
        )

    def insert(self, rows: list[dict[str, Any]]) -> None:
        payload = "\n".join(orjson.dumps(row).decode() for row in rows)
        self.session.query(f"INSERT INTO otel.otel_logs FORMAT JSONEachRow\n{payload}")

    def run(self, file: str, **params: str) -> list[dict[str, Any]]:
        for name, value in params.items():
            self.session.query(f"SET param_{name} = '{value}'")
        out = self.session.query((QUERIES / file).read_text(), "JSONEachRow")
        return [orjson.loads(line) for line in out.bytes().splitlines() if line.strip()]

    def close(self) -> None:
        self.session.close()


TOOLS: dict[str, Any] = {
    name: {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("read_file", "write_file")
}


def chat(running: Running, session: str, model: str, tools: list[str]) -> None:
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="sk-x", max_retries=0)
    extra: dict[str, Any] = {"tools": [TOOLS[t] for t in tools]} if tools else {}
    client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-modeltap-session": session},
        **extra,
    )


def test_the_queries_answer_what_the_files_say(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    with HttpReceiver() as receiver:
        first = start_proxy(otlp=receiver.endpoint)
        for tools in (["read_file"], ["read_file"], ["read_file", "write_file"], ["write_file"]):
            chat(first, "a", "gpt-5", tools)
        claude = anthropic.Anthropic(base_url=first.base(), api_key="k", max_retries=0)
        for _ in range(2):
            claude.messages.create(
                model="claude-x",
                max_tokens=16,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-modeltap-session": "b"},
            )
        first.proxy.stop()
        second = start_proxy(otlp=receiver.endpoint)
        chat(second, "c", "gpt-4.1", [])
        chat(second, "d", "gpt-5", ["read_file"])
        second.proxy.stop()
        logs = receiver.logs
    runs = {p.proxy.run_id: p for p in (first, second)}
    lines = sum(
        len(read_jsonl(p.out / f))
        for p in runs.values()
        for f in ("audit.jsonl", "events.jsonl", "sessions.jsonl")
    )
    assert len(logs) == lines

    clickhouse = ClickHouse(tmp_path / "chdb")
    try:
        rows = [exporter_row(log) for log in logs]
        clickhouse.insert(rows + rows)  # both paths fed the table: every line twice

        gpt5 = clickhouse.run("runs_by_model.sql", model="gpt-5")
        assert [(r["run_id"], r["requests"], r["sessions"]) for r in gpt5] == [
            (first.proxy.run_id, 4, 1),
            (second.proxy.run_id, 1, 1),
        ]
        gpt41 = clickhouse.run("runs_by_model.sql", model="gpt-4.1")
        assert [r["run_id"] for r in gpt41] == [second.proxy.run_id]
        assert clickhouse.run("runs_by_model.sql", model="no-such-model") == []

        changes = clickhouse.run("tool_catalogue_changes.sql")
        assert [
            (r["run_id"], r["session_id"], r["turn"], r["added"], r["removed"]) for r in changes
        ] == [
            (first.proxy.run_id, "a", 3, ["write_file"], []),
            (first.proxy.run_id, "a", 4, [], ["read_file"]),
        ]

        tokens = clickhouse.run("tokens_per_session.sql")
        expected = []
        for run_id, running in sorted(runs.items()):
            by_session: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
            for event in running.events("response"):
                by_session[event["session_id"]].append(event["usage"])
            for session, usages in sorted(by_session.items()):

                def total(key: str, usages: list[dict[str, Any]] = usages) -> int | None:
                    known = [u[key] for u in usages if u[key] is not None]
                    return sum(known) if known else None

                expected.append(
                    {
                        "run_id": run_id,
                        "session_id": session,
                        "responses": len(usages),
                        "input_tokens": total("input_tokens"),
                        "output_tokens": total("output_tokens"),
                        "cache_read_tokens": total("cache_read_tokens"),
                        "cache_write_tokens": total("cache_write_tokens"),
                        "reasoning_tokens": total("reasoning_tokens"),
                        "input_unknown": sum(u["input_tokens"] is None for u in usages),
                        "output_unknown": sum(u["output_tokens"] is None for u in usages),
                    }
                )
        # Counts come back as numbers or, for 64-bit ones, as strings: compare numbers.
        normalised = [
            {k: v if k in ("run_id", "session_id") or v is None else int(v) for k, v in row.items()}
            for row in tokens
        ]
        assert normalised == expected
        assert {row["session_id"] for row in tokens} == {"a", "b", "c", "d"}
    finally:
        clickhouse.close()


def test_the_docs_show_the_queries_the_tests_run() -> None:
    def normalised(sql: str) -> str:
        lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
        return " ".join(" ".join(lines).split())

    docs = (ROOT / "docs" / "FLEET.md").read_text()
    shown = {normalised(block) for block in re.findall(r"```sql\n(.*?)```", docs, re.S)}
    assert shown == {normalised(path.read_text()) for path in QUERIES.glob("*.sql")}
