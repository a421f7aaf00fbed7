"""``mitmproxy.ctx`` with a master, options and log per asyncio context.

mitmproxy keeps the running master and its options in globals of
``mitmproxy.ctx``, set by each ``Master``, and hands every new connection
to ``ctx.master`` with ``ctx.options``. With two proxies in one process
(two pytest fixtures, a harness running two) every connection went to the
master made last: the first proxy's requests were audited into the second
one's out dir, under its options. :func:`install` gives each of those names
a value per asyncio context: a proxy makes its master inside its own event
loop's main task, and that loop's tasks and callbacks (servers, connections,
timers) inherit the context. Outside any proxy (mitmproxy's test helpers),
the last value set anywhere, as before.
"""

from __future__ import annotations

import contextvars
import types
from typing import Any

import mitmproxy
from mitmproxy import ctx as mitm_ctx

from modeltap.addons.patches import capture

#: mitmproxy's module, kept before :func:`install` changes its class.
capture(mitmproxy, "ctx")


class ContextCtx(types.ModuleType):
    """The class of ``mitmproxy.ctx`` once installed: ``master``, ``options`` and
    ``log`` read and set per asyncio context, everything else as a module."""

    _names: dict[str, contextvars.ContextVar[Any]] = {
        name: contextvars.ContextVar(f"mitmproxy.ctx.{name}")
        for name in ("master", "options", "log")
    }
    _last: dict[str, Any] = {}

    def __getattribute__(self, name: str) -> Any:
        names = ContextCtx._names
        if name in names:
            try:
                return names[name].get()
            except LookupError:
                try:
                    return ContextCtx._last[name]
                except KeyError:
                    raise AttributeError(name) from None
        return super().__getattribute__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ContextCtx._names:
            ContextCtx._names[name].set(value)
            ContextCtx._last[name] = value
        else:
            super().__setattr__(name, value)


def install() -> None:
    """Give ``mitmproxy.ctx`` its per-context values (idempotent; the whole process)."""
    module = mitm_ctx
    if not isinstance(module, ContextCtx):
        for name in ContextCtx._names:
            if name in module.__dict__:
                ContextCtx._last[name] = module.__dict__.pop(name)
        module.__class__ = ContextCtx
