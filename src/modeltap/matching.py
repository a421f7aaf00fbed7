"""Matching a replayed run against a recording (pure).

Requests are matched in order within a session on their
:class:`~modeltap.recording.TurnKey` (model, tool names, instructions hash,
image count, stream, input hash). Sessions pair up by name when the name was
recorded (``x-modeltap-session``, ``--session``), else by order of first
appearance among the recorded sessions of the same transport (a live run's
default session is its run id, new each run, and each WebSocket connection
is a session of its own). A mismatched turn is used up, so the turns after
it still line up. Concurrent requests of one session replay in the order
they were audited.

Each difference is a :class:`Problem`: one line of ``OUT/replay-diff.jsonl``
(``kind``: ``mismatch``, ``exhausted`` or ``unplayed``; ``message`` such as
``"session s1 turn 2: tool 'lookup' no longer advertised"``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from modeltap.recording import Entry, Recording, TurnKey
from modeltap.records import Json, utc_now

MISMATCH: Final = "modeltap_replay_mismatch"
EXHAUSTED: Final = "modeltap_replay_exhausted"
UNRECORDED: Final = "modeltap_replay_unrecorded"


@dataclass(frozen=True, slots=True)
class Problem:
    """One line of the diff."""

    kind: str  # mismatch | exhausted | unplayed
    message: str
    session_id: str | None = None
    recorded_session: str | None = None
    turn: int | None = None

    def to_json(self) -> Json:
        return {"ts": utc_now(), **dataclasses.asdict(self)}


@dataclass(frozen=True, slots=True)
class Played:
    """What to answer one request with: a recorded entry, or an error."""

    entry: Entry | None
    problems: tuple[Problem, ...] = ()
    code: str | None = None

    @property
    def error_message(self) -> str:
        details = "; ".join(p.message for p in self.problems)
        return f"modeltap replay: the request does not match the recording ({details})"


def _short(sha: str | None) -> str:
    return "none" if sha is None else sha[:8] + "…"


def _tool_changes(old: tuple[str, ...] | None, new: tuple[str, ...] | None) -> list[str]:
    if old == new:
        return []
    if old is None or new is None:
        return [f"tool catalogue changed ({_tools(old)} -> {_tools(new)})"]
    lines = [f"tool {name!r} no longer advertised" for name in old if name not in new]
    lines += [f"tool {name!r} newly advertised" for name in new if name not in old]
    return lines or [f"tools reordered ({_tools(old)} -> {_tools(new)})"]


def _tools(names: tuple[str, ...] | None) -> str:
    return "not stated" if names is None else "[" + ", ".join(names) + "]"


def describe_changes(recorded: Entry, transport: str, api: str | None, key: TurnKey) -> list[str]:
    """What differs between a recorded turn and a replayed request, most specific first.

    The input hash covers the whole body, so it changes with every other
    field; it is named only when nothing more specific changed.

    Args:
        recorded: the recorded turn.
        transport: ``http`` or ``websocket``.
        api: the replayed request's API.
        key: the replayed request's key.

    Returns:
        One phrase per difference; empty when the request matches.
    """
    out: list[str] = []
    if recorded.transport != transport:
        out.append(f"transport changed ({recorded.transport} -> {transport})")
    if recorded.api != api:
        out.append(f"api changed ({recorded.api} -> {api})")
    old = recorded.key
    if old is None:
        return [*out, "the recorded turn has no key"]
    if old.model != key.model:
        out.append(f"model changed ({old.model!r} -> {key.model!r})")
    out += _tool_changes(old.tool_names, key.tool_names)
    if old.instructions_sha256 != key.instructions_sha256:
        out.append(
            f"instructions changed (sha256 {_short(old.instructions_sha256)} -> "
            f"{_short(key.instructions_sha256)})"
        )
    if old.image_count != key.image_count:
        out.append(f"image count changed ({old.image_count} -> {key.image_count})")
    if old.stream != key.stream:
        out.append(f"stream changed ({str(old.stream).lower()} -> {str(key.stream).lower()})")
    if not out and old.input_sha256 != key.input_sha256:
        out.append(
            f"input changed (sha256 {_short(old.input_sha256)} -> {_short(key.input_sha256)})"
        )
    return out


class Player:
    """Hands out recorded turns in order, per session, and notes what differed."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._free = list(recording.sessions)
        self._bound: dict[str, str | None] = {}
        self._next: dict[str, int] = dict.fromkeys(recording.sessions, 0)
        self._unbound_turns: dict[str, int] = {}

    def _bind(self, live: str, transport: str) -> str | None:
        if live in self._bound:
            return self._bound[live]
        chosen: str | None = None
        if live in self._free:
            chosen = live
        else:
            for name in self._free:
                if self.recording.sessions[name][0].transport == transport:
                    chosen = name
                    break
        if chosen is not None:
            self._free.remove(chosen)
        self._bound[live] = chosen
        return chosen

    def play(self, live: str, transport: str, api: str | None, key: TurnKey) -> Played:
        """The answer to the next request of session ``live``.

        Args:
            live: the replayed request's session id.
            transport: ``http`` or ``websocket``.
            api: its API.
            key: its key.

        Returns:
            The recorded entry, or (entry None) the problems and error code.
        """
        recorded = self._bind(live, transport)
        if recorded is None:
            n = self._unbound_turns[live] = self._unbound_turns.get(live, 0) + 1
            message = f"session {live} turn {n}: the recording has no session left to replay it"
            return Played(None, (Problem("exhausted", message, live, None, n),), EXHAUSTED)
        turns = self.recording.sessions[recorded]
        index = self._next[recorded]
        self._next[recorded] = index + 1
        label = f"session {recorded} turn {index + 1}"
        if index >= len(turns):
            message = f"{label}: the recording is exhausted ({len(turns)} turns recorded)"
            return Played(
                None, (Problem("exhausted", message, live, recorded, index + 1),), EXHAUSTED
            )
        entry = turns[index]
        changes = describe_changes(entry, transport, api, key)
        if changes:
            problems = tuple(
                Problem("mismatch", f"{label}: {change}", live, recorded, index + 1)
                for change in changes
            )
            return Played(None, problems, MISMATCH)
        return Played(entry)

    def unaudited(self, method: str, path: str) -> Entry | None:
        """A recorded unaudited exchange with this method and path (reusable)."""
        for entry in self.recording.unaudited:
            if entry.method == method and entry.path == path:
                return entry
        return None

    def unplayed(self) -> list[Problem]:
        """The recorded turns no request asked for."""
        out: list[Problem] = []
        for name, turns in self.recording.sessions.items():
            played = min(self._next[name], len(turns))
            if played == len(turns):
                continue
            if name in self._free:
                message = f"session {name}: not replayed ({len(turns)} turns recorded)"
            else:
                message = (
                    f"session {name}: turns {played + 1}-{len(turns)} of {len(turns)} "
                    "were not replayed"
                )
            out.append(Problem("unplayed", message, None, name, played + 1))
        return out

    @property
    def turns_recorded(self) -> int:
        return sum(len(t) for t in self.recording.sessions.values())
