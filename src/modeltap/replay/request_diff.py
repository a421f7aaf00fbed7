"""Where two request bodies differ, as JSON paths with sizes (pure).

``modeltap replay`` compares each replayed request with the recorded one. A
hash says *that* the input changed; a reader needs to know *where*:
``messages[3].content[0].text: 412 -> 398 bytes``. :func:`body_changes` walks
the two parsed bodies side by side and names every place they differ:

* a value changed: ``path: 412 -> 398 bytes`` (the size of a string is its
  UTF-8 length, of anything else its compact JSON), or ``path: changed (12
  bytes)`` when the size stayed, or ``path: string -> object`` when the type
  changed;
* a key or list item added or removed: ``path: added (120 bytes)``,
  ``path: removed (120 bytes)``. Lists are aligned on their items (a message
  inserted in the middle is one addition, not a change of every later one).

The texts hold structure and sizes only: no value of the body, so they can go
into the error the agent gets, onto stderr and into ``replay-diff.jsonl``.
Content is given only when asked for (``show_content``: ``modeltap replay
--show-content``), in separate lines, and never for a key named like a
credential (``api_key``, ``token``, ``secret``, ``password`` ...). A key
that is not a plain identifier (free text used as a key) is shown by its size
only. Headers are never compared: they are not part of a body.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = ["BodyChange", "body_changes", "summarize"]

#: Keys shown as they are in a path; others are shown by their size.
_PLAIN_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
#: Keys whose values are never shown, even with ``show_content``.
_SECRET_KEY: Final = re.compile(
    r"(?i)(^|[_-])(api[_-]?key|apikey|secret|client[_-]?secret|password|passwd|"
    r"authorization|auth|credentials?|signature|token|access[_-]?token|refresh[_-]?token)$"
)
#: How much of a value ``show_content`` shows (characters).
CONTENT_LIMIT: Final = 200


@dataclass(frozen=True, slots=True)
class BodyChange:
    """One place where the bodies differ.

    Attributes:
        path: the JSON path (``messages[3].content[0].text``; ``$`` for the
            whole body).
        text: what changed there, sizes only (``412 -> 398 bytes``).
        content: the values, when asked for and allowed; else ``None``.
    """

    path: str
    text: str
    content: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.text}"


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return len(orjson.dumps(value))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _key(path: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[<key of {_size(key)} bytes>]"


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    shown = orjson.dumps(text[:CONTENT_LIMIT]).decode()
    return shown + ("…" if len(text) > CONTENT_LIMIT else "")


class _Walk:
    def __init__(self, show_content: bool) -> None:
        self.show_content = show_content
        self.out: list[BodyChange] = []

    def content(self, secret: bool, before: Any, after: Any, what: str) -> str | None:
        if not self.show_content:
            return None
        if secret:
            return "(not shown: the key names a credential)"
        if what == "added":
            return f"added {_shown(after)}"
        if what == "removed":
            return f"removed {_shown(before)}"
        return f"{_shown(before)} -> {_shown(after)}"

    def add(self, path: str, text: str, secret: bool, before: Any, after: Any, what: str) -> None:
        content = self.content(secret, before, after, what)
        self.out.append(BodyChange(path or "$", text, content))

    def walk(self, path: str, before: Any, after: Any, secret: bool = False) -> None:
        if before == after and type(before) is type(after):
            return
        if isinstance(before, dict) and isinstance(after, dict):
            for key in [*before, *(k for k in after if k not in before)]:
                hidden = secret or bool(_SECRET_KEY.search(key))
                where = _key(path, key)
                if key not in after:
                    size = _size(before[key])
                    self.add(where, f"removed ({size} bytes)", hidden, before[key], None, "removed")
                elif key not in before:
                    size = _size(after[key])
                    self.add(where, f"added ({size} bytes)", hidden, None, after[key], "added")
                else:
                    self.walk(where, before[key], after[key], hidden)
            return
        if isinstance(before, list) and isinstance(after, list):
            self.walk_list(path, before, after, secret)
            return
        a, b = _size(before), _size(after)
        if _kind(before) != _kind(after):
            text = f"{_kind(before)} -> {_kind(after)} ({a} -> {b} bytes)"
        elif a != b:
            text = f"{a} -> {b} bytes"
        else:
            text = f"changed ({a} bytes)"
        self.add(path, text, secret, before, after, "changed")

    def walk_list(self, path: str, before: list[Any], after: list[Any], secret: bool) -> None:
        keys_a = [orjson.dumps(item, option=orjson.OPT_SORT_KEYS) for item in before]
        keys_b = [orjson.dumps(item, option=orjson.OPT_SORT_KEYS) for item in after]
        matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
        for op, a0, a1, b0, b1 in matcher.get_opcodes():
            if op == "equal":
                continue
            paired = min(a1 - a0, b1 - b0) if op == "replace" else 0
            for k in range(paired):
                # Indexes as the replayed body has them.
                self.walk(f"{path}[{b0 + k}]", before[a0 + k], after[b0 + k], secret)
            for k in range(a0 + paired, a1):
                size = _size(before[k])
                where = f"{path}[{k}]"
                self.add(where, f"removed ({size} bytes)", secret, before[k], None, "removed")
            for k in range(b0 + paired, b1):
                size = _size(after[k])
                self.add(f"{path}[{k}]", f"added ({size} bytes)", secret, None, after[k], "added")


def body_changes(
    recorded: Any, replayed: Any, *, show_content: bool = False, ignore: Iterable[str] = ()
) -> list[BodyChange]:
    """Every place where a replayed request body differs from the recorded one.

    Args:
        recorded: the recorded body, parsed.
        replayed: the replayed body, parsed.
        show_content: also give the values (never those of credential-named keys).
        ignore: top-level keys not to compare (volatile fields, or fields a
            more specific phrase already described).

    Returns:
        The changes in body order; empty when the bodies are equal.
    """
    skip = set(ignore)
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        recorded = {k: v for k, v in recorded.items() if k not in skip}
        replayed = {k: v for k, v in replayed.items() if k not in skip}
    walk = _Walk(show_content)
    walk.walk("", recorded, replayed)
    return walk.out


def summarize(changes: Sequence[BodyChange], limit: int = 6) -> list[str]:
    """The first ``limit`` changes as texts, and how many more there are.

    Args:
        changes: from :func:`body_changes`.
        limit: how many to name.

    Returns:
        ``["messages[3].content: 412 -> 398 bytes", ..., "and 4 more"]``.
    """
    out = [str(change) for change in changes[:limit]]
    if len(changes) > limit:
        out.append(f"and {len(changes) - limit} more")
    return out
