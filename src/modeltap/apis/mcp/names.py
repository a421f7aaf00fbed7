"""How agents name an MCP server's tools to their model (pure).

An agent presents each tool of a configured MCP server to the model under a
name of its own making, and the model's tool call uses that name; the
``tools/call`` it then sends names the server's own tool
(tests/data/mcp/README.md, "The agent CLIs"):

- Claude Code: ``mcp__{server}__{tool}``;
- Codex: a namespace tool ``mcp__{server}`` holding the function ``{tool}``
  (the call carries ``namespace`` and ``name``);
- Gemini CLI: ``mcp_{server}_{tool}``;
- an agent of one's own may offer the tool under its bare name.

``server`` is the name the agent's configuration gives the server (the
start-up screen's snippets use the ``--mcp NAME``). The agents replace
characters a model API does not take in a tool name, so names are compared
with every character outside ``[A-Za-z0-9_-]`` read as ``_``.
"""

from __future__ import annotations

import re
from typing import Final

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)


def names_server_tool(name: str | None, namespace: str | None, server: str, tool: str) -> bool:
    """Whether the model's call of ``name`` (in ``namespace``) is a call of ``server``'s ``tool``.

    Args:
        name: the tool name of the model's call.
        namespace: the call's namespace (Codex), if it has one.
        server: the server's name (``--mcp NAME``).
        tool: the tool the ``tools/call`` names.
    """
    if name is None:
        return False
    server, tool, name = _safe(server), _safe(tool), _safe(name)
    if namespace is not None:
        return _safe(namespace) == f"mcp__{server}" and name == tool
    return name in (tool, f"mcp__{server}__{tool}", f"mcp_{server}_{tool}")


def named_as_mcp_tool(name: str | None, namespace: str | None) -> bool:
    """Whether a model's call names a tool the way an agent names an MCP
    server's (``mcp__NAME__tool``, namespace ``mcp__NAME``, ``mcp_NAME_tool``):
    such a call ran on an MCP server, seen by the proxy or not."""
    if namespace is not None and namespace.startswith("mcp__"):
        return True
    return name is not None and name.startswith("mcp_")
