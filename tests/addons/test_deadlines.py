"""The deadlines addon: its options, and the timers of live exchanges."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import exceptions
from mitmproxy.test import tflow

from modeltap.addons.deadlines import DEADLINE_KEY, Deadline, Deadlines
from tests.addons.conftest import tap

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("modeltap_upstream_timeout", "read=5", "--upstream-timeout takes"),
        ("modeltap_upstream_timeout", "idle=0", "positive number of seconds"),
        ("modeltap_client_timeout", "soon", "the client timeout must be"),
        ("tcp_timeout", 30, r"tcp_timeout \(30 s\) must be longer"),
    ],
)
async def test_bad_timeouts_are_refused(
    tmp_path: Path, option: str, value: object, message: str
) -> None:
    with tap(tmp_path) as t, pytest.raises(exceptions.OptionsError, match=message):
        t.tctx.options.update(**{option: value})


async def test_the_limits_in_force(tmp_path: Path) -> None:
    with tap(tmp_path, upstream_timeout="first-byte=900,idle=2m", client_timeout="5") as t:
        timeouts = t.addon(Deadlines).timeouts
        assert (timeouts.first_byte, timeouts.idle, timeouts.request) == (900, 120, 5)


async def test_a_timer_per_exchange_moved_by_phase_and_stopped(tmp_path: Path) -> None:
    with tap(tmp_path, upstream_timeout="connect=10,first-byte=500,idle=200") as t:
        deadlines = t.addon(Deadlines)
        flow = tflow.tflow()
        deadlines.watch(flow, "request")
        deadline: Deadline = flow.metadata[DEADLINE_KEY]
        first = deadline.when
        assert deadline.handle is not None and deadline.watch == "request"
        deadlines.watch(flow, "waiting")  # connect (10 s) is sooner than 60 s: re-armed
        assert deadline.when < first and deadline.watch == "waiting"
        later = deadline.when
        deadlines.watch(flow, "response")  # idle (200 s) is later: the timer set looks then
        assert deadline.when == later and deadline.watch == "response"
        assert deadlines.stop(flow) is None and deadline.handle is None
        assert deadlines.stop(tflow.tflow()) is None  # never watched
