"""What replaces or wraps mitmproxy internals, kept apart from the addons so
that every place modeltap reaches inside mitmproxy is in one folder.

The patches go in with :func:`replace`, which keeps the original the first
time (so installing twice changes nothing, and :func:`original` finds
mitmproxy's own code even once it is replaced).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

#: The originals of what :func:`replace` replaced, by ``module:qualified.name``.
_ORIGINALS: dict[str, Any] = {}


def _key(owner: type | ModuleType, name: str) -> str:
    if isinstance(owner, ModuleType):
        return f"{owner.__name__}:{name}"
    return f"{owner.__module__}:{owner.__qualname__}.{name}"


def capture(owner: type | ModuleType, name: str) -> Any:
    """``owner.name`` as it was before any modeltap patch (kept the first time it is
    asked for, so asking again after :func:`replace` still gives the original)."""
    return _ORIGINALS.setdefault(_key(owner, name), getattr(owner, name))


def replace(owner: type | ModuleType, name: str, new: Any) -> None:
    """Put ``new`` in place of ``owner.name``, keeping the original (idempotent)."""
    capture(owner, name)
    setattr(owner, name, new)


def captured() -> frozenset[str]:
    """The targets (``module:qualified.name``) captured so far."""
    return frozenset(_ORIGINALS)


def original(target: str) -> Any:
    """The code at ``target`` (``module:qualified.name``): the library's own even
    when modeltap replaced it, or an owner on its path, with :func:`replace`.

    Raises:
        ImportError, AttributeError: there is no such code.
    """
    module, _, path = target.partition(":")
    found: Any = importlib.import_module(module)
    parts = path.split(".")
    for depth, part in enumerate(parts, 1):
        key = f"{module}:{'.'.join(parts[:depth])}"
        if key in _ORIGINALS:
            found = _ORIGINALS[key]
        elif depth == 1 and not hasattr(found, part):
            found = importlib.import_module(f"{module}.{part}")  # a submodule not yet imported
        else:
            found = getattr(found, part)
    return found
