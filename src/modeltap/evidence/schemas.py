"""The shipped JSON Schemas of the out dir's files, generated from records.py.

``src/modeltap/schemas/`` holds one schema per JSONL file: ``audit_record``
(a line of ``audit.jsonl``: a model request or an MCP message, one of
:data:`~modeltap.evidence.records.AUDIT_TYPES`), ``event`` (``events.jsonl``: one of
:data:`~modeltap.evidence.records.EVENT_TYPES`) and ``session``
(``sessions.jsonl``). They are generated from the dataclasses of
:mod:`modeltap.evidence.records`, never edited: ``python
scripts/make_schemas.py`` writes them and ``tests/test_schemas.py`` fails
when the committed files differ from what :func:`generated` gives.
(``report.schema.json``, the report's JSON, is written by hand beside
:mod:`modeltap.report.report`, which builds that JSON by hand too.)

msgspec turns the types, with their ``Annotated`` descriptions and promises,
into JSON Schema (draft 2020-12); then the writer's own rules are applied, so
a schema says what this modeltap writes, exactly:

* every object is closed and every field required:
  :func:`~modeltap.evidence.records.to_json_line` writes each field of the
  dataclass, and nothing else. Defaults are left out (they are how a line an
  older modeltap wrote reads, not what is written), and a field the writer
  sets itself (an event's ``kind``) is a ``const``;
* :data:`~modeltap.evidence.records.NEVER_NULL` takes null out of a field's types;
* a value the records name (:func:`~modeltap.evidence.records.named`: ``api``,
  ``timestamp``) used more than once in a file is written once, under ``$defs``;
  ``api`` lists the wires of the registry (:data:`modeltap.apis.APIS`), which
  the records, below the wires, cannot name, and in ``event``
  :data:`modeltap.apis.MCP`'s too (an MCP audit line's ``api`` is its own
  constant);
* ``X or null`` is spelled ``{"type": [X, "null"]}`` where that says the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Final

import msgspec
import orjson

from modeltap import apis
from modeltap.evidence import records
from modeltap.evidence.records import AUDIT_TYPES, EVENT_TYPES, SessionStatus

Schema = dict[str, Any]

#: Where the schemas are shipped (package data, ``modeltap/schemas``).
PACKAGE_DIR: Final = "schemas"
AUDIT_RECORD_SCHEMA: Final = "audit_record.schema.json"
EVENT_SCHEMA: Final = "event.schema.json"
SESSION_SCHEMA: Final = "session.schema.json"

_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_ID_BASE: Final = "https://modeltap.dev/schemas/"
_READERS: Final = (
    "This describes what the current writer emits exactly, generated from "
    "modeltap.evidence.records. Readers (modeltap.evidence.capture) also accept extra keys "
    "from newer writers, values a newer writer adds to an enum, and lines without a field "
    "added later (read as null, unknown)."
)
_NULL: Final = {"type": "null"}
#: Keys in the order a reader looks for them; others follow as msgspec gave them.
_KEY_ORDER: Final = (
    "$schema", "$id", "$ref", "title", "description", "type", "oneOf", "const", "enum",
    "additionalProperties", "required", "properties", "items", "uniqueItems", "minimum",
    "minLength", "maxLength", "pattern", "anyOf", "$defs",
)  # fmt: skip


def generated() -> dict[str, bytes]:
    """Every shipped schema, by file name, as the bytes the file holds."""
    files = {
        AUDIT_RECORD_SCHEMA: _union_file(
            AUDIT_RECORD_SCHEMA,
            AUDIT_TYPES,
            "modeltap audit record",
            "One line of audit.jsonl, written before what it records was forwarded: a "
            "validated outgoing model request (SPEC section 2), or one client-to-server MCP "
            'message (api "mcp", SPEC section 3b). Unknown is null, never 0 or ""; an empty '
            "list means sent, and empty.",
        ),
        EVENT_SCHEMA: _event_file(),
        SESSION_SCHEMA: _record_file(
            SESSION_SCHEMA,
            SessionStatus,
            "modeltap session end",
            "One line of sessions.jsonl: how a session ended, as the proxy saw it "
            "(execution facts, never a verdict on the agent's task).",
        ),
    }
    return {
        name: orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n"
        for name, schema in files.items()
    }


def shipped(name: str) -> bytes:
    """The bytes of a shipped schema file, as installed."""
    return resources.files("modeltap").joinpath(PACKAGE_DIR, name).read_bytes()


def write(directory: Path) -> list[Path]:
    """Write :func:`generated` into ``directory`` (``src/modeltap/schemas``).

    Returns:
        The files whose content changed.

    Raises:
        OSError: a file cannot be written.
    """
    changed = []
    for name, content in generated().items():
        path = directory / name
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
            changed.append(path)
    return changed


# --------------------------------------------------------------------------
# The files


def _record_file(name: str, root: type, title: str, description: str) -> Schema:
    (ref,), defs = _components([root])
    top = defs.pop(_def_name(ref))
    top.update(title=title, description=f"{description} {_READERS}")
    return _file(name, top, defs)


def _union_file(name: str, types: Iterable[type], title: str, description: str) -> Schema:
    refs, defs = _components(types)
    top: Schema = {"title": title, "description": f"{description} {_READERS}", "oneOf": refs}
    return _file(name, top, defs, mcp=False)


def _event_file() -> Schema:
    refs, defs = _components(EVENT_TYPES)
    top: Schema = {
        "title": "modeltap event",
        "description": "One line of events.jsonl (SPEC section 4), one of the kinds below. "
        "Every line carries kind, ts, run_id, session_id, request_id, and seq of the audit "
        f"record it belongs to (null where there is none). {_READERS} Unknown kinds are kept "
        "as a plain event.",
        "oneOf": refs,
    }
    return _file(EVENT_SCHEMA, top, defs)


def _file(name: str, top: Schema, defs: dict[str, Schema], *, mcp: bool = True) -> Schema:
    """A schema file; ``mcp``: its ``api`` values include MCP's."""
    schema: Schema = {"$schema": _DIALECT, "$id": _ID_BASE + name, **top, "$defs": defs}
    names = [api.NAME for api in apis.APIS] + ([apis.MCP.NAME] if mcp else [])
    for node in _nodes(schema):
        if node.get("title") == "api" and "properties" not in node:
            node["enum"] = names
    _hoist_named(schema)
    if not schema["$defs"]:
        del schema["$defs"]
    ordered: Schema = _ordered(schema)
    return ordered


def _components(types: Iterable[type]) -> tuple[list[Schema], dict[str, Schema]]:
    """msgspec's schemas of ``types``, with the writer's rules applied."""
    refs, defs = msgspec.json.schema_components(list(types), ref_template="#/$defs/{name}")
    for name, definition in defs.items():
        _close(getattr(records, name), definition)
    for node in _nodes(defs):
        _tidy(node)
    return list(refs), dict(defs)


def _def_name(ref: Schema) -> str:
    return str(ref["$ref"]).rsplit("/", 1)[1]


def _close(cls: type, definition: Schema) -> None:
    """A record's object: its fields in written order, all required, nothing else."""
    given = definition.pop("properties")
    properties: Schema = {}
    for f in dataclasses.fields(cls):
        prop = given[f.name]
        prop.pop("default", None)
        if not f.init:  # the writer sets it itself: always its default
            prop = {"const": f.default, **{k: v for k, v in prop.items() if k == "description"}}
        properties[f.name] = prop
    definition.pop("title", None)  # its $defs key names it
    definition.update(additionalProperties=False, required=list(properties), properties=properties)


def _tidy(node: Schema) -> None:
    """NEVER_NULL applied, and ``anyOf [X, null]`` folded into ``type`` where it says the same."""
    arms = node.get("anyOf")
    if arms is None:
        return
    if node.get("not") == _NULL:
        del node["not"]
        arms = [arm for arm in arms if arm != _NULL]
    if len(arms) == 2 and _NULL in arms:
        (arm,) = [a for a in arms if a != _NULL]
        # An enum, a const or a reference would refuse null once folded in.
        if isinstance(arm.get("type"), str) and not {"enum", "const", "$ref", "title"} & set(arm):
            arms = [{**arm, "type": [arm["type"], "null"]}]
    if len(arms) == 1:
        del node["anyOf"]
        assert not set(arms[0]) & set(node), f"cannot fold {arms[0]} into {node}"
        node.update(arms[0])
    else:
        node["anyOf"] = arms


def _hoist_named(schema: Schema) -> None:
    """A named value used more than once in the file goes to ``$defs`` once."""
    by_name: dict[str, list[Schema]] = {}
    for node in _nodes(schema):
        if node is not schema and isinstance(node.get("title"), str) and "properties" not in node:
            by_name.setdefault(node["title"], []).append(node)
    for name, uses in by_name.items():
        definition = {k: v for k, v in uses[0].items() if k != "title"}
        for use in uses:
            assert {k: v for k, v in use.items() if k != "title"} == definition, (
                f"the named value {name!r} differs between its uses: "
                "describe the field, not the named value"
            )
            use.clear()
            if len(uses) > 1:
                use["$ref"] = f"#/$defs/{name}"
            else:
                use.update(definition)
        if len(uses) > 1:
            schema["$defs"][name] = definition


def _nodes(value: Any) -> Iterator[Schema]:
    """Every object in a schema, innermost first (so a fold sees folded children)."""
    if isinstance(value, dict):
        for child in list(value.values()):
            yield from _nodes(child)
        yield value
    elif isinstance(value, list):
        for child in value:
            yield from _nodes(child)


def _ordered(value: Any, names: bool = False) -> Any:
    """Keys in :data:`_KEY_ORDER`; a map of names (properties, $defs) keeps its order."""
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    if not isinstance(value, dict):
        return value
    keys = list(value) if names else sorted(value, key=_rank)
    return {k: _ordered(value[k], names=not names and k in ("properties", "$defs")) for k in keys}


def _rank(key: str) -> int:
    return _KEY_ORDER.index(key) if key in _KEY_ORDER else len(_KEY_ORDER)
