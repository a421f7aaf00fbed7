"""A body declared in another charset (SPEC 2: records never contradict what the upstream reads).

JSON is UTF-8 and the audit reads it so; some servers decode a body by the
``charset`` its ``Content-Type`` declares (aiohttp's ``request.json()``).
With ``charset=latin-1`` the same bytes are other text there (a tool named
``café`` reads ``cafÃ©``, the instructions hash to another value); with
``charset=utf-16`` nothing the audit read. Sent by the ``openai`` and
``anthropic`` SDKs (a header the agent sets) and on a raw socket through a
real ``modeltap run`` process; the upstream must receive nothing.
"""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest

from tests.conftest import read_jsonl
from tests.reliability.test_processes import ProxyProcess
from tests.reliability.test_request_gate import CHAT_BYTES, send
from tests.upstream import Upstream

HI = [{"role": "user", "content": "hi"}]


def test_a_charset_other_than_utf8_is_refused(
    tmp_path: Path, upstream: Upstream, stub_process: ProxyProcess
) -> None:
    """Before: all 4 were audited and forwarded."""
    proc = stub_process
    oai = openai.OpenAI(base_url=proc.url + "/stub/v1", api_key="sk-test", max_retries=0)
    ant = anthropic.Anthropic(base_url=proc.url + "/stub", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="unsupported_charset"):
        oai.chat.completions.create(
            model="gpt-5",
            messages=HI,  # type: ignore[arg-type]
            extra_headers={"Content-Type": "application/json; charset=latin-1"},
        )
    with pytest.raises(anthropic.BadRequestError, match="unsupported_charset"):
        ant.messages.create(
            model="claude-x",
            max_tokens=5,
            messages=HI,  # type: ignore[arg-type]
            extra_headers={"Content-Type": 'application/json; charset="UTF-16"'},
        )
    for content_type in ("application/json, text/plain; charset=iso-8859-1",
                         "application/json; charset="):  # fmt: skip
        status, body = send(
            proc.port, "POST", "/stub/v1/chat/completions", CHAT_BYTES,
            {"Content-Type": content_type},
        )  # fmt: skip
        assert status == 400 and b"unsupported_charset" in body
    assert upstream.received == []
    assert not (tmp_path / "audit.jsonl").exists()
    # UTF-8 spelt any way, or no charset at all, is what the audit reads: audited.
    for content_type in ("application/json; charset=utf-8", 'application/json;charset="UTF8"',
                         "application/json"):  # fmt: skip
        status, _ = send(
            proc.port, "POST", "/stub/v1/chat/completions", CHAT_BYTES,
            {"Content-Type": content_type},
        )  # fmt: skip
        assert status == 200
    assert len(read_jsonl(tmp_path / "audit.jsonl")) == 3 == len(upstream.received)
