"""Endpoints that run a model on settings the request does not carry (SPEC 2).

An Assistants run runs a model with the assistant's stored instructions and
tools; an eval run runs one over a dataset; Bedrock's ``StartAsyncInvoke``
runs a model input in the background. None is a request modeltap can audit,
and each passed through as ``unaudited``. Sent by the ``openai`` SDK (as an
agent still on the Assistants API would) and on a raw socket through a real
``modeltap run`` process; the upstream must receive none of them, while
listing runs (a GET) still passes.
"""

from __future__ import annotations

from pathlib import Path

import openai
import orjson
import pytest

from tests.conftest import read_jsonl
from tests.reliability.test_processes import ProxyProcess
from tests.reliability.test_request_gate import send
from tests.upstream import Upstream


# Agents still on the Assistants API call it as it is: deprecated, not gone from the SDK.
@pytest.mark.filterwarnings("ignore:The Assistants API is deprecated:DeprecationWarning")
def test_runs_of_stored_settings_are_refused(
    tmp_path: Path, upstream: Upstream, stub_process: ProxyProcess, stub_openai: openai.OpenAI
) -> None:
    """Before: all 5 reached the upstream, logged `unaudited`."""
    proc, client = stub_process, stub_openai
    calls = [
        lambda: client.beta.threads.runs.create(thread_id="thread_1", assistant_id="asst_1"),
        lambda: client.beta.threads.create_and_run(assistant_id="asst_1"),
        lambda: client.beta.threads.runs.submit_tool_outputs(
            run_id="run_1",
            thread_id="thread_1",
            tool_outputs=[{"tool_call_id": "c", "output": "x"}],
        ),
        lambda: client.post("/evals/eval_1/runs", body={"data_source": {}}, cast_to=object),
    ]
    for call in calls:
        with pytest.raises(openai.BadRequestError, match="unsupported_endpoint"):
            call()
    body = orjson.dumps({"modelId": "amazon.nova-reel-v1:0", "modelInput": {"text": "x"}})
    status, answer = send(proc.port, "POST", "/stub/async-invoke", body)
    assert status == 400 and b"unsupported_endpoint" in answer
    assert upstream.received == []
    # Listing a thread's runs runs nothing: it passes.
    status, _ = send(proc.port, "GET", "/stub/v1/threads/thread_1/runs")
    assert [r.method for r in upstream.received] == ["GET"]
    events = read_jsonl(tmp_path / "events.jsonl")
    assert [e["rule"] for e in events if e["kind"] == "rejected"] == ["unsupported_endpoint"] * 5
