"""Chat's deprecated ``functions`` (SPEC 2: the record is what the upstream reads).

Chat Completions still takes ``functions`` (the tools before ``tools``) and
``role: "function"`` results; the audit read only ``tools`` and ``tool``
messages, so a request advertising ``rm_rf`` through ``functions`` was
recorded with no tools and no tool results while the upstream offered the
model the function. Sent by the ``openai`` SDK (its deprecated parameter)
through a real ``modeltap run`` process.
"""

from __future__ import annotations

from pathlib import Path

import openai

from tests.conftest import read_jsonl
from tests.upstream import Upstream


def test_deprecated_functions_are_in_the_record(
    tmp_path: Path, upstream: Upstream, stub_openai: openai.OpenAI
) -> None:
    """Before: `tool_names` [] and `tool_results` [] for this request."""
    client = stub_openai
    messages = [
        {"role": "user", "content": "clean up"},
        {"role": "assistant", "content": None, "function_call": {"name": "ls", "arguments": "{}"}},
        {"role": "function", "name": "ls", "content": "a b"},
    ]
    client.chat.completions.create(
        model="gpt-5",
        messages=messages,  # type: ignore[arg-type]
        functions=[{"name": "ls", "parameters": {}}, {"name": "rm_rf", "parameters": {}}],
    )
    (record,) = read_jsonl(tmp_path / "audit.jsonl")
    assert record["tool_names"] == ["ls", "rm_rf"]
    assert record["tool_results"] == [{"call_id": None, "bytes": 3, "is_error": None}]
    assert len(upstream.received) == 1
