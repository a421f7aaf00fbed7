"""Gemini ``generateContent``, the request side (SPEC section 2, "More wires").

Two body forms, told apart by shape: the request itself, or Code Assist's
wrapper ``{model, project, user_prompt_id, request: {…}}`` whose ``request``
holds it (the model is then the body's ``model``). A body with ``request``
beside a field of the request itself could be read either way, and is
refused. Keys are read in both spellings (:mod:`~modeltap.apis.gemini.spelling`);
a part whose ``data`` oneof holds two members (text and ``inlineData``) is
refused, and so is a body ``model`` (the wrapper's, or the wrapped
request's) naming another model than the path (``model_mismatch``).
Instructions are ``systemInstruction.parts[].text`` (a part that is not
plain text is refused); client tools ``tools[].functionDeclarations[].name``;
every other key of a ``tools[]`` entry (``googleSearch``, ``codeExecution``,
``urlContext``, …) is a hosted tool ``{type: key, name: null}``. Effort is
``generationConfig.thinkingConfig.thinkingLevel``; ``thinking`` is the
``thinkingConfig`` as sent (``includeThoughts``, ``thinkingBudget``,
``thinkingLevel`` in either spelling; any other key by name only). Images
are ``inlineData`` / ``fileData`` parts with an ``image/*`` MIME type anywhere
in ``contents``, a ``functionResponse``'s own ``parts`` included (the SDKs
put a tool's image there; Gemini CLI sends it as the next part); the detail
is the part's ``mediaResolution.level``, else the request's
``generationConfig.mediaResolution``, else ``None``. Tool results are
``functionResponse`` parts (``call_id`` its ``id`` or ``None``; bytes the
compact JSON of ``response``). With ``cachedContent`` the instructions and
tools the request does not state are the cache's: ``None`` and listed in
``omitted_settings``.
"""

from __future__ import annotations

from typing import Any, Final

from modeltap.apis.contract import EndpointMatch
from modeltap.apis.fields import (
    SettingKeys,
    bounded,
    instructions_digest,
    optional_name,
    optional_str,
    reject_messages_and_input,
    require_model,
    setting_by_name,
)
from modeltap.apis.gemini.content import generation_settings
from modeltap.apis.gemini.spelling import (
    camel_case,
    field,
    has_field,
    lenient_field,
    request_of,
    snake_case,
)
from modeltap.apis.json_body import utf8_len
from modeltap.evidence.records import HostedTool, Json, RequestFacts, ToolResult
from modeltap.rules.errors import Rejected, Rule

#: Fields of the request itself; one of them beside Code Assist's ``request``
#: makes a body that could be read two ways.
_REQUEST_FIELDS: Final = (
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "cachedContent",
    "safetySettings",
)
#: ``thinkingConfig`` keys whose values the record keeps; others by name only.
_THINKING_KEYS: Final[SettingKeys] = {
    "includeThoughts": bool,
    "include_thoughts": bool,
    "thinkingBudget": int,
    "thinking_budget": int,
    "thinkingLevel": str,
    "thinking_level": str,
}
#: ``--image-detail`` values as Gemini's media resolution levels.
_RESOLUTIONS: Final = {
    "low": "MEDIA_RESOLUTION_LOW",
    "high": "MEDIA_RESOLUTION_HIGH",
    "auto": "MEDIA_RESOLUTION_UNSPECIFIED",
}
#: Finish reasons as the GenAI conventions name them; others are kept as sent.


#: ``thoughtSignature``, ``mediaResolution`` and the like sit beside it).
_PART_DATA: Final = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)
#: Part keys that carry model output besides ``text``.


def audit_request(body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
    """Read the audit facts off a ``generateContent`` body (either form).

    Args:
        body: the parsed request body: the request, or Code Assist's wrapper.
        endpoint: what the path said (:func:`match_endpoint`): the model it
            names (the Developer API and Vertex; Code Assist's is the
            wrapper's ``model``) and whether it asks for a stream
            (``:streamGenerateContent``). ``None``: a path naming neither.

    Returns:
        The facts. ``model`` is the path's, else the body's (the wrapper's
        ``model``, or the request's optional ``model`` field); ``stream`` is
        what the path says; ``previous_response_id``, ``generate`` and
        ``include_usage`` are ``None``.

    Raises:
        Rejected: ``missing_model`` (neither the path nor the body names
            one, or a wrapper without one), ``model_mismatch`` (the path,
            the wrapper and the request name different models),
            ``messages_and_input``,
            ``malformed_messages``, ``malformed_tools``,
            ``tool_without_name``, ``malformed_image``,
            ``instructions_not_text``, ``malformed_setting``,
            ``value_too_long`` or ``duplicate_key``.
    """
    reject_messages_and_input(body)
    stream = endpoint is not None and endpoint.stream
    named = endpoint.model_from_path if endpoint is not None else None
    if "request" in body:
        if any(has_field(body, name) for name in _REQUEST_FIELDS):
            raise Rejected(Rule.MALFORMED_MESSAGES, "contents or request")
        wrapped_model = require_model(body)
        request = body["request"]
        if not isinstance(request, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, "request")
        # Every model the request names must be one: the path's, the wrapper's,
        # the wrapped request's own (upstreams differ on which they read).
        _same_model(wrapped_model, named)
        _same_model(_body_model(request), named or wrapped_model)
        return _audit(request, named or wrapped_model, stream, "request.")
    model = _body_model(body)
    if not (named or model):
        raise Rejected(Rule.MISSING_MODEL)
    # The path's model is what Google serves; a body naming another is refused.
    _same_model(model, named)
    return _audit(body, named or model or "", stream, "")


def _body_model(body: Json) -> str | None:
    """A body's optional ``model`` (bounded), ``None`` when absent or empty.

    Raises:
        Rejected: ``missing_model`` when it is not a string.
    """
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise Rejected(Rule.MISSING_MODEL)
    return bounded(model, "model") if model else None


def _same_model(sent: str | None, named: str | None) -> None:
    """Refuse a body model that names another model than the path (or the wrapper).

    The same model may be spelt as its id (``gemini-2.5-pro``), with its
    collection (``models/gemini-2.5-pro``) or as a full resource name
    (``projects/p/locations/l/publishers/google/models/gemini-2.5-pro``).

    Raises:
        Rejected: ``model_mismatch``.
    """
    if sent is None or named is None:
        return
    sent, named = sent.removeprefix("models/"), named.removeprefix("models/")
    if sent == named or sent.endswith("/models/" + named):
        return
    if "/" in named and sent.endswith("/" + named):  # tunedModels/x, endpoints/e
        return
    raise Rejected(Rule.MODEL_MISMATCH)


def _audit(request: Json, model: str, stream: bool, at: str) -> RequestFacts:
    """The facts of the request itself; ``at`` prefixes the field paths of refusals."""
    contents = field(request, "contents", f"{at}contents")
    if not isinstance(contents, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, f"{at}contents")
    config = field(request, "generationConfig", f"{at}generationConfig")
    if config is None:
        config = {}
    elif not isinstance(config, dict):
        raise Rejected(Rule.MALFORMED_SETTING, f"{at}generationConfig")
    thinking, effort = _thinking(config, f"{at}generationConfig")
    default_detail = optional_str(
        field(config, "mediaResolution", f"{at}generationConfig"),
        f"{at}generationConfig.mediaResolution",
    )

    cached = field(request, "cachedContent", f"{at}cachedContent")
    if cached is not None and not isinstance(cached, str):
        raise Rejected(Rule.MALFORMED_SETTING, f"{at}cachedContent")
    system = field(request, "systemInstruction", f"{at}systemInstruction")
    tools = field(request, "tools", f"{at}tools")
    omitted: tuple[str, ...] = ()
    if cached is not None:
        # The cache holds instructions and tools of its own: what the request
        # does not state is not known here (SPEC section 2).
        omitted = tuple(
            name for name, value in (("instructions", system), ("tools", tools)) if value is None
        )
    tool_names, hosted_tools = _tools(tools, f"{at}tools")
    instructions = None if "instructions" in omitted else _instructions(system, at)

    images: list[str | None] = []
    tool_results: list[ToolResult] = []
    for i, content in enumerate(contents):
        where = f"{at}contents[{i}]"
        if not isinstance(content, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, where)
        for j, part in enumerate(_parts(content, where)):
            _read_part(part, f"{where}.parts[{j}]", default_detail, images, tool_results)

    instructions_sha256, instructions_parts = instructions_digest(instructions)
    return RequestFacts(
        model=model,
        tool_names=None if "tools" in omitted else tool_names,
        reasoning_effort=effort,
        thinking=thinking,
        image_details=tuple(images),
        instructions_sha256=instructions_sha256,
        instructions_parts=instructions_parts,
        stream=stream,
        hosted_tools=hosted_tools,
        tool_results=tuple(tool_results),
        previous_response_id=None,
        generate=None,
        omitted_settings=omitted,
        settings=generation_settings(config),
    )


def _parts(content: Json, where: str) -> list[Json]:
    """A content's ``parts``: a list of objects (absent: none)."""
    found = field(content, "parts", where)
    if found is None:
        return []
    if not isinstance(found, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.parts")
    for j, part in enumerate(found):
        if not isinstance(part, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.parts[{j}]")
        if sum(has_field(part, name) for name in _PART_DATA) > 1:
            # A part's data is a oneof: a part holding text and an image is read
            # as either by different parsers, and the record could show the other.
            raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.parts[{j}]")
    return found


def _thinking(config: Json, where: str) -> tuple[Json | None, str | None]:
    """``thinkingConfig`` as the record keeps it, and its ``thinkingLevel``."""
    value = field(config, "thinkingConfig", where)
    where = f"{where}.thinkingConfig"
    if isinstance(value, dict):
        for camel in ("includeThoughts", "thinkingBudget", "thinkingLevel"):
            field(value, camel, where)  # both spellings of one key: refused
    thinking = setting_by_name(value, _THINKING_KEYS, where)
    level = field(thinking, "thinkingLevel", where) if thinking is not None else None
    return thinking, optional_str(level, f"{where}.thinkingLevel")


def _instructions(system: Any, at: str) -> list[str]:
    """The texts of ``systemInstruction`` (absent: none; no parts: one empty text)."""
    where = f"{at}systemInstruction"
    if system is None:
        return []
    if not isinstance(system, dict):
        raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)
    found = field(system, "parts", where)
    if found is None:
        return [""]
    if not isinstance(found, list):
        raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, f"{where}.parts")
    texts: list[str] = []
    for j, part in enumerate(found):
        # Only a part that is text and nothing else: a thought, a signature or
        # data beside it would be instructions the hash does not show.
        if not isinstance(part, dict) or set(part) != {"text"} or not isinstance(part["text"], str):
            raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, f"{where}.parts[{j}]")
        texts.append(part["text"])
    return texts or [""]


def _tools(tools: Any, where: str) -> tuple[tuple[str, ...], tuple[HostedTool, ...]]:
    """Client tool names and hosted tools of ``tools``, in order (absent: none)."""
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise Rejected(Rule.MALFORMED_TOOLS, where)
    names: list[str] = []
    hosted: list[HostedTool] = []
    for i, tool in enumerate(tools):
        at = f"{where}[{i}]"
        if not isinstance(tool, dict):
            raise Rejected(Rule.MALFORMED_TOOLS, at)
        if len({camel_case(key) for key in tool}) != len(tool):
            raise Rejected(Rule.DUPLICATE_KEY, at)
        for key, value in tool.items():
            if camel_case(key) != "functionDeclarations":
                hosted.append(HostedTool(bounded(key, f"{at}.type"), None))
                continue
            if not isinstance(value, list):
                raise Rejected(Rule.MALFORMED_TOOLS, f"{at}.functionDeclarations")
            for j, declaration in enumerate(value):
                spot = f"{at}.functionDeclarations[{j}]"
                if not isinstance(declaration, dict):
                    raise Rejected(Rule.MALFORMED_TOOLS, spot)
                name = declaration.get("name")
                if not isinstance(name, str) or not name:
                    raise Rejected(Rule.TOOL_WITHOUT_NAME, spot)
                names.append(bounded(name, spot))
    return tuple(names), tuple(hosted)


def _read_part(
    part: Json,
    where: str,
    default_detail: str | None,
    images: list[str | None],
    tool_results: list[ToolResult],
) -> None:
    """Count one part's image and tool result (a function response's own parts too)."""
    _read_media(part, where, default_detail, images)
    response = field(part, "functionResponse", where)
    if response is None:
        return
    spot = f"{where}.functionResponse"
    if not isinstance(response, dict):
        raise Rejected(Rule.MALFORMED_MESSAGES, spot)
    result = field(response, "response", spot)
    tool_results.append(
        ToolResult(
            optional_name(field(response, "id", spot), f"{spot}.id"),
            0 if result is None else utf8_len(result),
        )
    )
    for k, inner in enumerate(_parts(response, spot)):
        _read_media(inner, f"{spot}.parts[{k}]", default_detail, images)


def _read_media(
    part: Json, where: str, default_detail: str | None, images: list[str | None]
) -> None:
    """Add the detail of a part's image (``inlineData`` or ``fileData``), if it holds one."""
    for camel, payload in (("inlineData", "data"), ("fileData", "fileUri")):
        blob = field(part, camel, where)
        if blob is None:
            continue
        if not isinstance(blob, dict):
            raise Rejected(Rule.MALFORMED_IMAGE, where)
        mime = field(blob, "mimeType", where)
        if not isinstance(mime, str) or not isinstance(field(blob, payload, where), str):
            raise Rejected(Rule.MALFORMED_IMAGE, where)
        if mime.lower().startswith("image/"):
            images.append(_detail(part, where, default_detail))


def _detail(part: Json, where: str, default_detail: str | None) -> str | None:
    """A part's ``mediaResolution.level``, else the request's resolution."""
    resolution = field(part, "mediaResolution", where)
    if resolution is None:
        return default_detail
    if not isinstance(resolution, dict):
        raise Rejected(Rule.MALFORMED_IMAGE, where)
    level = field(resolution, "level", where)
    if not isinstance(level, str):
        raise Rejected(Rule.MALFORMED_IMAGE, where)
    return bounded(level, where)


def set_image_detail(body: Json, detail: str) -> int:
    """Give every image part the media resolution ``detail`` asks for, in place.

    ``low`` and ``high`` become ``MEDIA_RESOLUTION_LOW`` / ``_HIGH``, ``auto``
    ``MEDIA_RESOLUTION_UNSPECIFIED`` (the model's default), set on each image
    part as ``mediaResolution: {level}`` (a snake_case spelling is replaced).

    Args:
        body: a request body that :func:`audit_request` accepted.
        detail: ``low``, ``high`` or ``auto``.

    Returns:
        How many images were rewritten.
    """
    level = _RESOLUTIONS.get(detail, detail)
    request = request_of(body)
    contents = lenient_field(request, "contents")
    count = 0

    def rewrite(part: Any) -> None:
        nonlocal count
        if not isinstance(part, dict):
            return
        for camel in ("inlineData", "fileData"):
            blob = part.get(camel, part.get(snake_case(camel)))
            mime = blob.get("mimeType", blob.get("mime_type")) if isinstance(blob, dict) else None
            if isinstance(mime, str) and mime.lower().startswith("image/"):
                part.pop("media_resolution", None)
                part["mediaResolution"] = {"level": level}
                count += 1

    for content in contents if isinstance(contents, list) else ():
        found = content.get("parts") if isinstance(content, dict) else None
        for part in found if isinstance(found, list) else ():
            rewrite(part)
            response = part.get("functionResponse", part.get("function_response"))
            inner = response.get("parts") if isinstance(response, dict) else None
            for item in inner if isinstance(inner, list) else ():
                rewrite(item)
    return count
