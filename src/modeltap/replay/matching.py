"""Matching a replayed run against a recording (pure).

Requests are matched in order within a session on their
:class:`~modeltap.replay.recording.TurnKey` (model, tool names, instructions hash,
image count, stream, input hash). Sessions pair up by name when the name was
recorded (``x-modeltap-session``, ``--session``), else by order of first
appearance among the recorded sessions of the same transport (a live run's
default session is its run id, new each run, and each WebSocket connection
is a session of its own). Concurrent requests of one session replay in the
order they were audited.

**One change, one diff line.** The player resynchronises after a
difference instead of letting it shift every later turn:

* a request equal to the next recorded turn plays it;
* a request equal to a later recorded turn (within :data:`LOOKAHEAD`) plays
  that one: the turns in between were **not asked for** (deleted), one line;
* any other request is answered with an error and one **mismatch** line
  comparing it with the next recorded turn, which is *held*: if the next
  request matches the held turn, the mismatched one was an **inserted**
  turn; if it matches the turn after, the held one was **changed**; either
  way no further line. The same mismatched request sent again (an SDK or
  agent retry) gets the same error and no new line. A request that matches
  nothing while a turn is held takes the held turn as changed and is
  compared with the next one.

A mismatch names what changed, most specific first (transport, API, model,
tools, image count, stream), then where the body changed as JSON paths with
sizes (:mod:`modeltap.replay.request_diff`: ``messages[3].content[0].text: 412 ->
398 bytes``), never a value: content only with ``show_content``, in the
diff file and on stderr, never in the error the agent gets.

Each difference is a :class:`Problem`: one line of ``OUT/replay-diff.jsonl``
(``kind``: ``mismatch``, ``skipped``, ``exhausted`` or ``unplayed``;
``message`` such as ``"session s1 turn 2: tool 'lookup' no longer
advertised"``). Turn numbers count from 1; when the live turn and the
recorded one differ (after an insertion or a deletion) both are named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

from modeltap.evidence.records import Json, utc_now
from modeltap.replay.mcp import describe_mcp_changes
from modeltap.replay.recording import (
    VOLATILE_FIELDS,
    Entry,
    McpKey,
    Recording,
    TurnKey,
    comparable_body,
)
from modeltap.replay.request_diff import BodyChange, body_changes, summarize

MISMATCH: Final = "modeltap_replay_mismatch"
EXHAUSTED: Final = "modeltap_replay_exhausted"
UNRECORDED: Final = "modeltap_replay_unrecorded"

#: How many recorded turns ahead a request is looked for before it is called a
#: mismatch (further away, an equal request is more likely a repeat than a
#: resynchronisation).
LOOKAHEAD: Final = 10


def plural(n: int, noun: str) -> str:
    """``1 turn``, ``3 turns``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def span(first: int, last: int, noun: str = "turn") -> str:
    """``turn 3``, ``turns 3-5``."""
    return f"{noun} {first}" if first == last else f"{noun}s {first}-{last}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One line of the diff."""

    kind: str  # mismatch | skipped | exhausted | unplayed
    message: str
    session_id: str | None = None
    recorded_session: str | None = None
    #: The recorded turn's number (from 1), or the live one when nothing was recorded.
    turn: int | None = None
    #: The replayed request's turn number in its session (from 1), when there is one.
    live_turn: int | None = None
    #: What changed, one phrase each (the message joins them).
    changes: tuple[str, ...] = ()
    #: With ``--show-content``: the changed values, path by path.
    content: tuple[str, ...] = ()

    def to_json(self) -> Json:
        out = {"ts": utc_now(), **dataclasses.asdict(self)}
        out["changes"] = list(self.changes)
        if not self.content:
            out.pop("content")
        else:
            out["content"] = list(self.content)
        return out


@dataclass(frozen=True, slots=True)
class Played:
    """What to answer one request with: a recorded entry, or an error."""

    entry: Entry | None
    #: Differences to note now (a repeat of a noted mismatch adds none).
    problems: tuple[Problem, ...] = ()
    code: str | None = None
    #: What the agent is told when there is no entry (no request content).
    detail: str | None = None

    @property
    def error_message(self) -> str:
        details = self.detail or "; ".join(p.message for p in self.problems)
        return f"modeltap replay: the request does not match the recording ({details})"


@dataclass(slots=True)
class _Held:
    """A recorded turn a mismatched request was compared with, not yet used up."""

    index: int
    key: TurnKey | McpKey
    problem: Problem


@dataclass(slots=True)
class _Progress:
    """Where a recorded session stands."""

    next: int = 0
    held: _Held | None = None


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


def describe_changes(
    recorded: Entry,
    transport: str,
    api: str | None,
    key: TurnKey,
    bodies: tuple[Any, Any] | None = None,
    *,
    show_content: bool = False,
) -> tuple[list[str], list[BodyChange]]:
    """What differs between a recorded turn and a replayed request, most specific first.

    Args:
        recorded: the recorded turn.
        transport: ``http`` or ``websocket``.
        api: the replayed request's API.
        key: the replayed request's key.
        bodies: the recorded and the replayed body, parsed, when both are
            known: the instructions and input then show as JSON paths with
            sizes instead of hashes.
        show_content: give the changed values too (see :mod:`modeltap.replay.request_diff`).

    Returns:
        One phrase per difference (empty when the request matches), and the
        body changes behind the path phrases.
    """
    out: list[str] = []
    said: set[str] = set()  # top-level body keys a phrase already describes
    if recorded.transport != transport:
        out.append(f"transport changed ({recorded.transport} -> {transport})")
    if recorded.api != api:
        out.append(f"api changed ({recorded.api} -> {api})")
    old = recorded.key
    if old is None:
        return [*out, "the recorded turn has no key"], []
    if old.model != key.model:
        out.append(f"model changed ({old.model!r} -> {key.model!r})")
        said.add("model")
    tools = _tool_changes(old.tool_names, key.tool_names)
    if tools:
        out += tools
        said.add("tools")
    if old.image_count != key.image_count:
        out.append(f"image count changed ({old.image_count} -> {key.image_count})")
    if old.stream != key.stream:
        out.append(f"stream changed ({str(old.stream).lower()} -> {str(key.stream).lower()})")
        said.add("stream")
    hashes = old.instructions_sha256 != key.instructions_sha256 or (
        old.input_sha256 != key.input_sha256
    )
    if not hashes:
        return out, []
    if bodies is not None:
        changes = body_changes(
            bodies[0], bodies[1], show_content=show_content, ignore=VOLATILE_FIELDS | said
        )
        if changes or out:
            if old.instructions_sha256 != key.instructions_sha256:
                out.append("instructions changed")  # an audit field: said as one
            return out + summarize(changes), changes
    if old.instructions_sha256 != key.instructions_sha256:
        out.append(
            f"instructions changed (sha256 {_short(old.instructions_sha256)} -> "
            f"{_short(key.instructions_sha256)})"
        )
    if not out:
        out.append(
            f"input changed (sha256 {_short(old.input_sha256)} -> {_short(key.input_sha256)})"
        )
    return out, []


class Player:
    """Hands out recorded turns in order, per session, and notes what differed.

    Args:
        recording: the recording to replay.
        show_content: mismatch lines also give the changed values (never in
            the error the agent gets).
        sessions: the recorded sessions to hand out (default: the model
            turns'); one MCP server's exchanges for an MCP player.
        scope: what the lines call what is played, after the session
            (``" mcp server shapes"``; default: nothing).
        noun: what one played exchange is called (``turn``; ``request``).
    """

    def __init__(
        self,
        recording: Recording,
        *,
        show_content: bool = False,
        sessions: dict[str, list[Entry]] | None = None,
        scope: str = "",
        noun: str = "turn",
    ) -> None:
        self.recording = recording
        self.show_content = show_content
        self.sessions = recording.sessions if sessions is None else sessions
        self.scope = scope
        self.noun = noun
        self._free = list(self.sessions)
        self._bound: dict[str, str | None] = {}
        self._progress: dict[str, _Progress] = {name: _Progress() for name in self.sessions}
        self._live_turns: dict[str, int] = {}

    def bind(self, live: str, recorded: str) -> None:
        """Replay session ``live`` from recorded session ``recorded`` (when
        neither is bound yet): a replayed MCP session is the one whose
        ``Mcp-Session-Id`` the replay handed out for the recorded one."""
        if live not in self._bound and recorded in self._free:
            self._free.remove(recorded)
            self._bound[live] = recorded

    def _bind(self, live: str, transport: str) -> str | None:
        if live in self._bound:
            return self._bound[live]
        chosen: str | None = None
        if live in self._free:
            chosen = live
        else:
            for name in self._free:
                if self.sessions[name][0].transport == transport:
                    chosen = name
                    break
        if chosen is not None:
            self._free.remove(chosen)
        self._bound[live] = chosen
        return chosen

    def play(
        self,
        live: str,
        transport: str,
        api: str | None,
        key: TurnKey | McpKey,
        body: Any = None,
    ) -> Played:
        """The answer to the next request of session ``live``.

        Args:
            live: the replayed request's session id.
            transport: ``http`` or ``websocket``.
            api: its API.
            key: its key.
            body: its parsed body, to say where it differs (optional).

        Returns:
            The recorded entry, or (entry None) the error code, the detail for
            the agent and the problems to note.
        """
        n = self._live_turns[live] = self._live_turns.get(live, 0) + 1
        recorded = self._bind(live, transport)
        if recorded is None:
            message = (
                f"session {live}{self.scope} {self.noun} {n}: "
                "the recording has no session left to replay it"
            )
            return Played(None, (Problem("exhausted", message, live, None, n, n),), EXHAUSTED)
        turns = self.sessions[recorded]
        progress = self._progress[recorded]
        held = progress.held
        if held is not None and held.key == key:
            # The mismatched request sent again (a retry): same answer, no new line.
            return Played(None, (), MISMATCH, detail=held.problem.message)
        for j in range(progress.next, min(progress.next + LOOKAHEAD, len(turns))):
            if _same(turns[j], transport, api, key):
                return self._resync(live, recorded, n, j, turns)
        if held is not None:
            progress.next = held.index + 1  # the held turn was changed, not skipped
            progress.held = None
        index = progress.next
        if index >= len(turns):
            message = (
                f"session {recorded}{self.scope} {self.noun} {n}: the recording is exhausted "
                f"({plural(len(turns), self.noun)} recorded)"
            )
            return Played(None, (Problem("exhausted", message, live, recorded, n, n),), EXHAUSTED)
        entry = turns[index]
        bodies = None
        if body is not None:
            old = self.recording.request_body(entry)
            if old is not None:  # compared as the input hash compares them
                bodies = (comparable_body(old, entry.api), comparable_body(body, api))
        if isinstance(key, McpKey):
            changes, body_diff = describe_mcp_changes(
                entry.mcp, key, bodies, show_content=self.show_content
            )
        else:
            changes, body_diff = describe_changes(
                entry, transport, api, key, bodies, show_content=self.show_content
            )
        label = _label(f"{recorded}{self.scope}", n, index + 1, self.noun)
        problem = Problem(
            "mismatch",
            f"{label}: {'; '.join(changes)}",
            live,
            recorded,
            index + 1,
            n,
            tuple(changes),
            tuple(f"{c.path}: {c.content}" for c in body_diff if c.content is not None),
        )
        progress.held = _Held(index, key, problem)
        return Played(None, (problem,), MISMATCH)

    def _resync(self, live: str, recorded: str, n: int, found: int, turns: list[Entry]) -> Played:
        """Play recorded turn ``found``; the unheld turns before it were not asked for."""
        progress = self._progress[recorded]
        start = progress.next
        if progress.held is not None and progress.held.index == start and found > start:
            start += 1  # compared with a mismatched request already: changed, not skipped
        progress.held = None
        problems: tuple[Problem, ...] = ()
        if found > start:
            first, last = start + 1, found
            noun = self.noun
            message = (
                f"session {recorded}{self.scope}: recorded {span(first, last, noun)} "
                f"{'was' if first == last else 'were'} not asked for "
                f"({noun} {n} asked for recorded {noun} {found + 1})"
            )
            problems = (Problem("skipped", message, live, recorded, first, n),)
        progress.next = found + 1
        return Played(turns[found], problems)

    def unaudited(self, method: str, path: str) -> Entry | None:
        """A recorded unaudited exchange with this method and path (reusable)."""
        for entry in self.recording.unaudited:
            if entry.method == method and entry.path == path:
                return entry
        return None

    def unplayed(self) -> list[Problem]:
        """The recorded turns no request asked for (and no line named yet)."""
        out: list[Problem] = []
        noun = self.noun
        for name, turns in self.sessions.items():
            progress = self._progress[name]
            done = progress.next
            if progress.held is not None:
                done = progress.held.index + 1  # its mismatch line names it
            done = min(done, len(turns))
            if done == len(turns):
                continue
            if name in self._free:
                message = (
                    f"session {name}{self.scope}: not replayed "
                    f"({plural(len(turns), noun)} recorded)"
                )
            else:
                left = len(turns) - done
                message = (
                    f"session {name}{self.scope}: {span(done + 1, len(turns), noun)} of "
                    f"{len(turns)} {'was' if left == 1 else 'were'} not replayed"
                )
            out.append(Problem("unplayed", message, None, name, done + 1))
        return out

    @property
    def turns_recorded(self) -> int:
        return sum(len(t) for t in self.sessions.values())


def _same(entry: Entry, transport: str, api: str | None, key: TurnKey | McpKey) -> bool:
    if isinstance(key, McpKey):
        same = entry.mcp is not None and entry.mcp.matches(key)
    else:
        same = entry.key == key
    return entry.transport == transport and entry.api == api and same


def _label(recorded: str, live_turn: int, recorded_turn: int, noun: str = "turn") -> str:
    """``session s1 turn 3``, with the recorded turn when the two differ."""
    label = f"session {recorded} {noun} {live_turn}"
    if live_turn != recorded_turn:
        label += f" (recorded {noun} {recorded_turn})"
    return label
