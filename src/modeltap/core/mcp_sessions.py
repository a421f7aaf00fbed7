"""The MCP sessions a run follows: what one session's exchanges share (pure).

An MCP answer need not come on the exchange that asked: a POST's result can
arrive on a resumed GET stream (``Last-Event-ID``), and over HTTP+SSE every
answer comes on the one GET stream. So what is waiting for an answer lives
here, per MCP session, not on the exchange: a result is matched by (MCP
session, direction, id). Ids are per direction (the client's ``initialize``
and the server's ``sampling/createMessage`` are both ``1`` in one session),
and ``0`` is an id like any other.

One :class:`McpState` per ``(server, session)``; traffic without a session
(stateless servers, 2026-07-28) shares its server's ``(server, None)``
state, which holds only what is safe to share between clients there: the
tools' header declarations and the executions an ``input_required`` result
leaves open (named by an opaque ``requestState``). Its answers are matched
on their own exchange only: two sessionless clients both count from 1.

Memory is bounded everywhere: at most :data:`MAX_STATES` states (the least
recently used is forgotten), and per state at most :data:`MAX_PENDING` of
each kind of entry (the oldest is forgotten; an answer to it is then written
unmatched, ``seq: null``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from modeltap.apis.mcp.headers import ToolHeaders
from modeltap.core.notices import ExchangeView
from modeltap.evidence.records import McpAuditRecord

#: MCP sessions followed at once (the least recently used is forgotten).
MAX_STATES: Final = 1024
#: Entries of each kind one state keeps (requests awaiting answers, server
#: requests awaiting the client's, open executions, tools).
MAX_PENDING: Final = 4096

#: ``(server, session key)``: a state's key; the key is ``None`` without a session.
StateKey = tuple[str, str | None]


@dataclass(slots=True)
class Pending:
    """A client request awaiting its answer."""

    record: McpAuditRecord
    #: The exchange that carried it (its session and request id head the answer's event).
    view: ExchangeView
    forwarded_ns: int
    #: tools/call: the seq of the tools/call that began the execution (itself,
    #: or the one an ``input_required`` retry continues).
    execution_seq: int | None = None
    answered: bool = False


def _bounded_set[K, V](entries: OrderedDict[K, V], key: K, value: V) -> None:
    entries[key] = value
    entries.move_to_end(key)
    while len(entries) > MAX_PENDING:
        entries.popitem(last=False)


@dataclass(slots=True)
class McpState:
    """What one MCP session's exchanges share."""

    key: StateKey
    #: Client requests awaiting an answer, by id (sessions only).
    pending: OrderedDict[bytes, Pending] = field(default_factory=OrderedDict)
    #: Server requests awaiting the client's answer: id -> method.
    asked: OrderedDict[bytes, str | None] = field(default_factory=OrderedDict)
    #: Executions an ``input_required`` result left open: the SHA-256 of its
    #: ``requestState`` -> the seq of the tools/call that began them.
    open_executions: OrderedDict[str, int] = field(default_factory=OrderedDict)
    #: Each tool's ``Mcp-Param-*`` declarations, from the ``tools/list`` results seen.
    tools: OrderedDict[str, ToolHeaders] = field(default_factory=OrderedDict)

    @property
    def sessionful(self) -> bool:
        """Whether the traffic has a session (answers may come on another exchange)."""
        return self.key[1] is not None

    def await_answer(self, id_key: bytes, pending: Pending) -> None:
        """A request went: its answer may come on any exchange of the session."""
        if self.sessionful:
            _bounded_set(self.pending, id_key, pending)

    def answer_for(self, id_key: bytes) -> Pending | None:
        """The request an answer (seen on another exchange of the session) answers."""
        return self.pending.get(id_key) if self.sessionful else None

    def answered(self, id_key: bytes, pending: Pending) -> None:
        """The request has its answer: nothing waits for it any more."""
        pending.answered = True
        if self.pending.get(id_key) is pending:
            del self.pending[id_key]

    def server_asked(self, id_key: bytes, method: str | None) -> None:
        """The server asked the client something; the client's answer names it."""
        _bounded_set(self.asked, id_key, method)

    def execution_open(self, request_state_sha256: str, seq: int) -> None:
        """An ``input_required`` result: the retry with its requestState continues ``seq``."""
        _bounded_set(self.open_executions, request_state_sha256, seq)

    def learn_tools(self, tools: dict[str, ToolHeaders]) -> None:
        """A ``tools/list`` page: each tool's header declarations, replacing older ones."""
        for name, headers in tools.items():
            _bounded_set(self.tools, name, headers)

    def tool_headers(self, name: str) -> ToolHeaders | None:
        """A tool's ``Mcp-Param-*`` declarations, when a ``tools/list`` result named it."""
        return self.tools.get(name)


class McpSessions:
    """The MCP sessions of a run, each a :class:`McpState` (bounded, LRU)."""

    def __init__(self) -> None:
        self._states: OrderedDict[StateKey, McpState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    def state(self, key: StateKey) -> McpState:
        """The state of ``(server, session)``, made if new."""
        found = self._states.get(key)
        if found is None:
            found = self._states[key] = McpState(key)
            while len(self._states) > MAX_STATES:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(key)
        return found

    def drop(self, key: StateKey) -> None:
        """The MCP session ended (a DELETE the server accepted): forget it."""
        if key[1] is not None:
            self._states.pop(key, None)
