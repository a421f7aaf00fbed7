"""What modeltap answers itself: provider-shaped, naming the rule, quoting nothing."""

from __future__ import annotations

import orjson
import pytest

from modeltap.apis.anthropic_messages import NAME as API_ANTHROPIC
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.core import answers
from modeltap.rules.errors import Rejected, Rule
from modeltap.rules.routing import RouteTable, parse_upstream_url

ANTHROPIC_ROUTE = next(r for r in RouteTable.build([], None).routes if r.name == "anthropic")


def test_a_refusal_takes_its_providers_shape() -> None:
    openai = answers.refusal(Rejected(Rule.MISSING_MODEL), API_CHAT, None)
    assert (openai.status, openai.close) == (400, False)
    assert orjson.loads(openai.body)["error"]["code"] == "modeltap_rejected"
    anthropic = answers.refusal(Rejected(Rule.BODY_TOO_LARGE), None, ANTHROPIC_ROUTE)
    body = orjson.loads(anthropic.body)
    assert anthropic.status == 413 and body["type"] == "error" and "code" not in body["error"]
    assert (
        orjson.loads(answers.refusal(Rejected(Rule.MISSING_MODEL), API_ANTHROPIC, None).body)[
            "type"
        ]
        == "error"
    )


def test_answers_both_sdks_read_when_the_provider_is_unknown() -> None:
    for reply, status, code in (
        (answers.stopping(), 503, "modeltap_rejected"),
        (answers.no_route("/elsewhere", RouteTable.build([], None)), 404, "modeltap_no_route"),
        (answers.upstream_error(502, "refused"), 502, "modeltap_upstream_error"),
    ):
        body = orjson.loads(reply.body)
        assert reply.status == status and body["type"] == "error"
        assert body["error"]["code"] == code and body["error"]["message"].startswith("modeltap")
    assert answers.stopping().close
    assert not answers.no_route("/elsewhere", RouteTable.build([], None)).close


@pytest.mark.parametrize(
    ("path", "shape", "prefix"),
    [
        ("/v1/chat/completions", "openai", "/openai"),
        ("/v1/responses", "openai", "/openai"),
        ("/v1/messages?beta=true", "anthropic", "/anthropic"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "google", "/gemini"),
    ],
)
def test_no_route_answers_in_the_shape_of_the_api_the_path_looks_like(
    path: str, shape: str, prefix: str
) -> None:
    body = orjson.loads(answers.no_route(path, RouteTable.build([], None)).body)
    error = body["error"]
    if shape == "openai":
        assert set(body) == {"error"} and error["param"] is None
    elif shape == "anthropic":
        assert body["type"] == "error" and "param" not in error
    else:
        assert (error["code"], error["status"]) == (404, "NOT_FOUND")
    assert f"put {prefix} right after this proxy's address" in error["message"]
    assert "gemini-2.5-flash" not in error["message"]
    # A route of unknown provider named after the wire serves it too.
    own = RouteTable([parse_upstream_url(prefix[1:], "http://127.0.0.1:9")])
    said = orjson.loads(answers.no_route(path, own).body)["error"]["message"]
    assert f"put {prefix} right" in said
    other = RouteTable([parse_upstream_url("stub", "http://127.0.0.1:9")])
    said = orjson.loads(answers.no_route(path, other).body)["error"]["message"]
    assert "no route here serves it: add one with --route NAME=URL. Routes here: /stub" in said


def test_a_timeout_is_a_gateway_timeout_that_closes() -> None:
    reply = answers.failure("upstream_timeout", "idle", API_CHAT, None)
    error = orjson.loads(reply.body)["error"]
    assert (reply.status, reply.close, error["code"]) == (504, True, "modeltap_upstream_timeout")
    assert "[upstream_timeout]" in error["message"]


def test_the_refusals_doc_names_every_rule() -> None:
    """A user reading a refusal's ``[rule …]`` finds it in docs/REFUSALS.md (the
    WebSocket rules in docs/WEBSOCKET.md, which it points to), and the README
    points there."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    assert "](docs/REFUSALS.md)" in (root / "README.md").read_text()
    section = (root / "docs" / "REFUSALS.md").read_text()
    assert "](WEBSOCKET.md" in section
    websocket = (root / "docs" / "WEBSOCKET.md").read_text()
    places = {False: section, True: section + websocket}
    missing = [r.value for r in Rule if f"`{r.value}`" not in places[r.value.startswith("ws_")]]
    assert missing == []
