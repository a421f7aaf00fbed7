"""The control addon: its listener, its file, and its option's errors."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import orjson
import pytest
from mitmproxy import exceptions

from modeltap.addons.control import Control
from tests.addons.conftest import tap

pytestmark = pytest.mark.anyio


async def test_bad_addresses_are_refused(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with tap(tmp_path) as t:
            control = t.addon(Control)
            with pytest.raises(exceptions.OptionsError, match="is not HOST:PORT"):
                t.tctx.configure(control, modeltap_control="nowhere")
            with pytest.raises(exceptions.OptionsError, match="cannot listen for the control API"):
                t.tctx.configure(control, modeltap_control=f"127.0.0.1:{port}")


async def test_served_with_a_private_file_that_goes_at_the_end(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        control = t.addon(Control)
        assert t.run.control_address is not None and control.url is not None
        await control.running()
        assert control.server is not None and control.file is not None
        data = orjson.loads(control.file.read_bytes())
        assert (data["run_id"], data["url"]) == ("run-1", control.url) and data["token"]
        assert stat.S_IMODE(os.stat(control.file).st_mode) == 0o600
        file = control.file
        control.done()
        assert not file.exists()
