"""Gemini ``generateContent`` (``gemini.generate_content``): audit and observe.

Endpoints (SPEC section 2, "More wires"): a POST whose last path segment ends
in ``:generateContent`` or ``:streamGenerateContent`` (the custom-method
form of Google's APIs), under any prefix: the Developer API
(``/v1[beta]/models/{model}:…``), Vertex AI
(``/v1*/projects/{p}/locations/{l}/publishers/google/models/{model}:…`` and
the express form ``/v1*/publishers/google/models/{model}:…``, provider
``gcp.vertex_ai``), tuned models and endpoints (``tunedModels/{m}``,
``endpoints/{e}``: the model is that resource name), and Gemini CLI's Code
Assist wrapper (``/v1internal:generateContent``, no model in the path).
The model named by the path is what the upstream serves; the path also
says whether a stream is asked for (``:streamGenerateContent``).
``:countTokens`` and Code Assist's other methods are not model requests.

Request side. Two body forms, told apart by shape: the request itself, or
Code Assist's wrapper ``{model, project, user_prompt_id, request: {…}}``
whose ``request`` holds it (the model is then the body's ``model``). A body
with ``request`` beside a field of the request itself could be read either
way, and is refused. Keys come in camelCase and, from the Python SDK, in
snake_case (``thinking_config`` fields, ``inline_data.mime_type``): both are
read, as Google's JSON parser reads both; an object that spells one field
both ways is refused (``duplicate_key``), since parsers disagree on which
wins; so is a part whose ``data`` oneof holds two members (text and
``inlineData``), and a body ``model`` (the wrapper's, or the wrapped
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

Response side: a JSON ``GenerateContentResponse`` (Code Assist wraps it as
``{response, traceId}``), or a stream of them, as SSE (``?alt=sse``) or as
one JSON array whose elements arrive one by one
(:class:`~modeltap.wire.json_array.JsonArrayDecoder` hands each element over like
an SSE event, so one observer reads both). Usage is ``usageMetadata``
(``promptTokenCount`` input, cached tokens included; ``candidatesTokenCount``
output, thoughts excluded; ``thoughtsTokenCount`` reasoning;
``cachedContentTokenCount`` cache read; ``totalTokenCount``), finish reasons
``candidates[].finishReason`` as sent (``STOP``), tool calls the
``functionCall`` parts (``call_id`` ``None`` when the server sent no id: the
Developer API sends none; arguments the compact JSON of ``args``). A stream
is complete once a chunk with a ``finishReason`` (or a prompt
``blockReason``) has arrived. Thought signatures are never touched: the
response passes through byte for byte, and a request that carries them back
is forwarded as sent.

Why one module of ~950 lines: it is one wire, read whole, in the sections of
:mod:`modeltap.apis.contract` (request side, response side, what telemetry
reads), like the other API modules. Gemini needs more reading than most: two
spellings of every key, two body forms (Code Assist's wrapper), images in
three places, and three response framings; split in halves, a change to one
part type would touch two files that must agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

from modeltap.apis import message_parts as parts
from modeltap.apis.contract import EndpointMatch, RequestContent, ResponseContent
from modeltap.apis.fields import (
    SettingKeys,
    bounded,
    instructions_digest,
    number,
    objects,
    optional_name,
    optional_str,
    reject_messages_and_input,
    require_model,
    setting_by_name,
    str_or_none,
    string_list,
    token_count,
    whole_number,
)
from modeltap.apis.json_body import json_text, utf8_len
from modeltap.apis.stream_observer import ERROR_BODY, NOT_AN_OBJECT, StreamObserverBase
from modeltap.evidence.records import (
    API_GEMINI,
    HostedTool,
    Json,
    RequestFacts,
    RequestSettings,
    ResponseFacts,
    ToolCall,
    ToolResult,
    Usage,
)
from modeltap.rules.errors import Rejected, Rule
from modeltap.wire.sse import SSEEvent

NAME: Final = API_GEMINI
PROVIDER: Final = "gcp.gemini"
#: The provider of Vertex AI's paths (``…/publishers/…``, ``…/projects/…/locations/…``).
VERTEX_PROVIDER: Final = "gcp.vertex_ai"
OPENAI_API_TYPE: Final = None
#: ``usageMetadata``'s ``promptTokenCount``, ``candidatesTokenCount`` and
#: ``totalTokenCount``. ``cachedContentTokenCount`` comes only with cached
#: content and ``thoughtsTokenCount`` only from thinking models, and Gemini has
#: no cache-write count: their absence says nothing about completeness.
REPORTED_USAGE: Final = frozenset({"input_tokens", "output_tokens", "total_tokens"})

#: The model-running methods, lower case, and whether each streams.
_METHODS: Final = {"generatecontent": False, "streamgeneratecontent": True}
#: A version segment (``v1``, ``v1beta``, ``v1internal``): a method on it names no model.
_VERSION: Final = re.compile(r"v\d+[a-z0-9]*", re.IGNORECASE)

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
#: ``STOP`` with a function call in the candidate is ``tool_call``.
FINISH_REASONS: Final = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
}
#: The members of a part's ``data`` oneof (a part holds one; ``thought``,
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
_OUTPUT_KEYS: Final = (
    "functionCall",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
)


# --------------------------------------------------------------------------
# Endpoints


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match ``…/{resource}:generateContent`` or ``:streamGenerateContent``.

    The model is the segment after the last ``models`` (several segments when
    a decoded ``%2F`` split it; ``tunedModels/{m}`` keeps its collection), else
    the last ``{collection}/{id}`` pair; a method on a version segment
    (``/v1internal:generateContent``) names none (Code Assist's body does).
    See :meth:`WireApi.match_endpoint`.
    """
    head, _, last = path.rpartition("/")
    resource, colon, method = last.rpartition(":")
    stream = _METHODS.get(method.lower()) if colon else None
    if stream is None:
        return None
    names = [*head.split("/"), resource]
    lowered = [name.lower() for name in names]
    model: str | None
    collections = [i for i, name in enumerate(lowered[:-1]) if name in ("models", "tunedmodels")]
    found = collections[-1] if collections else -1
    if found >= 0:
        rest = "/".join(names[found + 1 :])
        model = rest if lowered[found] == "models" or not rest else f"{names[found]}/{rest}"
    elif _VERSION.fullmatch(resource) or not resource:
        model = None if resource else ""
    elif len(names) >= 2 and names[-2] and not _VERSION.fullmatch(names[-2]):
        model = f"{names[-2]}/{resource}"
    else:
        model = resource
    vertex = "publishers" in lowered or ("projects" in lowered and "locations" in lowered)
    return EndpointMatch(NAME, model, stream, provider=VERTEX_PROVIDER if vertex else None)


# --------------------------------------------------------------------------
# Reading fields in both spellings


def _snake(camel: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), camel)


def _field(obj: Json, camel: str, where: str) -> Any:
    """``obj``'s field ``camel``, spelt in camelCase or snake_case (``None`` if absent).

    Raises:
        Rejected: ``duplicate_key`` when both spellings are present.
    """
    snake = _snake(camel)
    if snake != camel and snake in obj:
        if camel in obj:
            raise Rejected(Rule.DUPLICATE_KEY, where)
        return obj[snake]
    return obj.get(camel)


def _is(obj: Json, camel: str) -> bool:
    """Whether ``obj`` has field ``camel`` in either spelling (reads nothing)."""
    return camel in obj or _snake(camel) in obj


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


# --------------------------------------------------------------------------
# Request side


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
        if any(_is(body, name) for name in _REQUEST_FIELDS):
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
    contents = _field(request, "contents", f"{at}contents")
    if not isinstance(contents, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, f"{at}contents")
    config = _field(request, "generationConfig", f"{at}generationConfig")
    if config is None:
        config = {}
    elif not isinstance(config, dict):
        raise Rejected(Rule.MALFORMED_SETTING, f"{at}generationConfig")
    thinking, effort = _thinking(config, f"{at}generationConfig")
    default_detail = optional_str(
        _field(config, "mediaResolution", f"{at}generationConfig"),
        f"{at}generationConfig.mediaResolution",
    )

    cached = _field(request, "cachedContent", f"{at}cachedContent")
    if cached is not None and not isinstance(cached, str):
        raise Rejected(Rule.MALFORMED_SETTING, f"{at}cachedContent")
    system = _field(request, "systemInstruction", f"{at}systemInstruction")
    tools = _field(request, "tools", f"{at}tools")
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
        settings=_settings(config),
    )


def _parts(content: Json, where: str) -> list[Json]:
    """A content's ``parts``: a list of objects (absent: none)."""
    found = _field(content, "parts", where)
    if found is None:
        return []
    if not isinstance(found, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.parts")
    for j, part in enumerate(found):
        if not isinstance(part, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.parts[{j}]")
        if sum(_is(part, name) for name in _PART_DATA) > 1:
            # A part's data is a oneof: a part holding text and an image is read
            # as either by different parsers, and the record could show the other.
            raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.parts[{j}]")
    return found


def _thinking(config: Json, where: str) -> tuple[Json | None, str | None]:
    """``thinkingConfig`` as the record keeps it, and its ``thinkingLevel``."""
    value = _field(config, "thinkingConfig", where)
    where = f"{where}.thinkingConfig"
    if isinstance(value, dict):
        for camel in ("includeThoughts", "thinkingBudget", "thinkingLevel"):
            _field(value, camel, where)  # both spellings of one key: refused
    thinking = setting_by_name(value, _THINKING_KEYS, where)
    level = _field(thinking, "thinkingLevel", where) if thinking is not None else None
    return thinking, optional_str(level, f"{where}.thinkingLevel")


def _instructions(system: Any, at: str) -> list[str]:
    """The texts of ``systemInstruction`` (absent: none; no parts: one empty text)."""
    where = f"{at}systemInstruction"
    if system is None:
        return []
    if not isinstance(system, dict):
        raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)
    found = _field(system, "parts", where)
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
        if len({_camel(key) for key in tool}) != len(tool):
            raise Rejected(Rule.DUPLICATE_KEY, at)
        for key, value in tool.items():
            if _camel(key) != "functionDeclarations":
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
    response = _field(part, "functionResponse", where)
    if response is None:
        return
    spot = f"{where}.functionResponse"
    if not isinstance(response, dict):
        raise Rejected(Rule.MALFORMED_MESSAGES, spot)
    result = _field(response, "response", spot)
    tool_results.append(
        ToolResult(
            optional_name(_field(response, "id", spot), f"{spot}.id"),
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
        blob = _field(part, camel, where)
        if blob is None:
            continue
        if not isinstance(blob, dict):
            raise Rejected(Rule.MALFORMED_IMAGE, where)
        mime = _field(blob, "mimeType", where)
        if not isinstance(mime, str) or not isinstance(_field(blob, payload, where), str):
            raise Rejected(Rule.MALFORMED_IMAGE, where)
        if mime.lower().startswith("image/"):
            images.append(_detail(part, where, default_detail))


def _detail(part: Json, where: str, default_detail: str | None) -> str | None:
    """A part's ``mediaResolution.level``, else the request's resolution."""
    resolution = _field(part, "mediaResolution", where)
    if resolution is None:
        return default_detail
    if not isinstance(resolution, dict):
        raise Rejected(Rule.MALFORMED_IMAGE, where)
    level = _field(resolution, "level", where)
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
    request = _request_of(body)
    contents = _get(request, "contents")
    count = 0

    def rewrite(part: Any) -> None:
        nonlocal count
        if not isinstance(part, dict):
            return
        for camel in ("inlineData", "fileData"):
            blob = part.get(camel, part.get(_snake(camel)))
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


# --------------------------------------------------------------------------
# Response side


def unwrap(body: Any) -> Any:
    """A response as Gemini writes it: Code Assist's ``{response, traceId}`` unwrapped.

    A ``GenerateContentResponse`` has no ``response`` field of its own, so
    the wrapper is told by shape.
    """
    if (
        isinstance(body, dict)
        and isinstance(body.get("response"), dict)
        and "candidates" not in body
        and "usageMetadata" not in body
    ):
        return body["response"]
    return body


def _usage(usage: Json) -> Usage:
    return Usage(
        input_tokens=token_count(usage.get("promptTokenCount")),
        output_tokens=token_count(usage.get("candidatesTokenCount")),
        total_tokens=token_count(usage.get("totalTokenCount")),
        cache_read_tokens=token_count(usage.get("cachedContentTokenCount")),
        reasoning_tokens=token_count(usage.get("thoughtsTokenCount")),
    )


def _call(call: Any) -> ToolCall:
    """A ``functionCall`` as a tool call: its id (``None`` when absent), name, ``args`` as JSON."""
    if not isinstance(call, dict):
        return ToolCall(None, None, None)
    args = call.get("args")
    return ToolCall(
        str_or_none(call.get("id")),
        str_or_none(call.get("name")),
        json_text(args) if args is not None else None,
    )


def _candidate_parts(candidate: Json) -> list[Json]:
    content = candidate.get("content")
    return objects(content.get("parts")) if isinstance(content, dict) else []


def _blocked(body: Json) -> str | None:
    feedback = body.get("promptFeedback")
    return str_or_none(feedback.get("blockReason")) if isinstance(feedback, dict) else None


def observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts:
    """Read what a non-streamed response (or an error body) says.

    Args:
        body: the parsed response body (Code Assist's wrapper is unwrapped).
        facts: the request's facts (unused).

    Returns:
        The observed facts; never raises. An error body gives status
        ``error``; a prompt blocked before any candidate gives status
        ``blocked`` and no finish reason.
    """
    body = unwrap(body)
    if not isinstance(body, dict):
        return NOT_AN_OBJECT
    if body.get("error") is not None:
        return ERROR_BODY
    errors: list[str] = []
    candidates = body.get("candidates")
    reasons: list[str] = []
    calls: list[ToolCall] = []
    blocked = _blocked(body)
    if candidates is None and blocked is None:
        errors.append("response has no candidates")
    elif candidates is not None and not isinstance(candidates, list):
        errors.append("response has a candidates value that is not a list")
    for candidate in candidates if isinstance(candidates, list) else ():
        if not isinstance(candidate, dict):
            errors.append("response has a candidate that is not an object")
            continue
        reason = candidate.get("finishReason")
        if isinstance(reason, str):
            reasons.append(reason)
        else:
            errors.append("response has a candidate without finishReason")
        for part in _candidate_parts(candidate):
            if "functionCall" in part:
                calls.append(_call(part["functionCall"]))
    usage = body.get("usageMetadata")
    return ResponseFacts(
        response_id=str_or_none(body.get("responseId")),
        model=str_or_none(body.get("modelVersion")),
        usage=_usage(usage) if isinstance(usage, dict) else Usage(),
        finish_reasons=tuple(reasons) if isinstance(candidates, list) or blocked else None,
        tool_calls=tuple(calls),
        status="blocked" if blocked is not None else None,
        evidence_complete=not errors,
        capture_errors=tuple(dict.fromkeys(errors)),
    )


class StreamObserver(StreamObserverBase):
    """Observe a streamed response, one chunk (SSE event or array element) at a time.

    Each chunk is a whole ``GenerateContentResponse`` (wrapped for Code
    Assist): usage is cumulative (the last reported wins), finish reasons
    come with the last chunk of each candidate, function calls arrive whole.
    Only facts are kept, never text, unless ``capture_content`` asks for the
    output to be assembled for spans (bounded).

    Args:
        facts: the request's facts (unused: Gemini's stream needs none).
        capture_content: assemble the output (content capture is on).
    """

    def __init__(self, facts: RequestFacts | None = None, *, capture_content: bool = False) -> None:
        super().__init__()
        self._response_id: str | None = None
        self._model: str | None = None
        self._usage: Usage | None = None
        self._reasons: dict[int, str] = {}
        self._calls: list[tuple[int, ToolCall]] = []
        self._status: str | None = None
        self._output = parts.OutputAssembler() if capture_content else None
        #: Per candidate: the key of its open text part and that part's kind.
        self._open: dict[int, tuple[int, str]] = {}
        self._keys = 0

    def feed(self, event: SSEEvent) -> bool:
        """Take one chunk.

        Args:
            event: an SSE event, or an array element handed over as one.

        Returns:
            True when the chunk carried model output (text, a thought, a
            function call, data). Never raises.
        """
        chunk = self._json_object(event.data, "stream chunk")
        if chunk is None:
            return False
        chunk = unwrap(chunk)
        if chunk.get("error") is not None:
            self._status = "error"
            self._note("upstream sent an error chunk")
            return False
        self._response_id = self._response_id or str_or_none(chunk.get("responseId"))
        self._model = self._model or str_or_none(chunk.get("modelVersion"))
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        if _blocked(chunk) is not None:
            self._status, self._done = "blocked", True
        candidates = chunk.get("candidates")
        if candidates is not None and not isinstance(candidates, list):
            self._note("stream chunk has a candidates value that is not a list")
            return False
        output = False
        for position, candidate in enumerate(candidates or ()):
            if isinstance(candidate, dict):
                output = self._feed_candidate(candidate, position) or output
            else:
                self._note("stream chunk has a candidate that is not an object")
        return output

    def _feed_candidate(self, candidate: Json, position: int) -> bool:
        index = candidate.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else position
        output = False
        for part in _candidate_parts(candidate):
            text = part.get("text")
            if isinstance(text, str):
                output = output or bool(text)
                if self._output is not None:
                    kind = "reasoning" if part.get("thought") is True else "text"
                    key, open_kind = self._open.get(index, (-1, ""))
                    if open_kind != kind:
                        self._keys += 1
                        key = self._keys
                        self._open[index] = (key, kind)
                    self._output.add_text(index, key, kind, text)
            if "functionCall" in part:
                call = _call(part["functionCall"])
                self._calls.append((index, call))
                if self._output is not None:
                    self._keys += 1
                    self._output.add_part(
                        index, self._keys, parts.tool_call(call.call_id, call.name, call.arguments)
                    )
                    self._open.pop(index, None)
            if any(key in part for key in _OUTPUT_KEYS):
                output = True
        reason = candidate.get("finishReason")
        if isinstance(reason, str):
            self._reasons[index] = reason
            self._done = True
        return output

    def _missing(self) -> Iterator[str]:
        if not self._done:
            yield "stream ended before a chunk with a finishReason"

    def _facts(self) -> ResponseFacts:
        reasons = tuple(reason for _, reason in sorted(self._reasons.items()))
        return ResponseFacts(
            response_id=self._response_id,
            model=self._model,
            usage=self._usage or Usage(),
            finish_reasons=reasons if self._reasons or self._status == "blocked" else None,
            tool_calls=tuple(call for _, call in sorted(self._calls, key=lambda c: c[0])),
            status=self._status,
            evidence_complete=not self._errors,
            capture_errors=tuple(self._errors),
            output_messages=self._assembled(),
        )

    def _assembled(self) -> list[Json] | None:
        if self._output is None:
            return None
        if not self._done:
            return self._output.messages(lambda _: "error")
        called = {index for index, _ in self._calls}
        return self._output.messages(
            lambda index: _finish(self._reasons.get(index), index in called)
        )


def _finish(reason: str | None, called: bool) -> str:
    """The conventions' finish reason of a candidate (``STOP`` after a call: ``tool_call``)."""
    if reason == "STOP" and called:
        return "tool_call"
    return parts.finish_reason(reason, FINISH_REASONS)


# --------------------------------------------------------------------------
# What telemetry reads (spans only; see modeltap.apis.contract)

#: Gemini's roles as the conventions name them.
_ROLES: Final = {"user": "user", "model": "assistant", "function": "tool", "tool": "tool"}


def _request_of(body: Json) -> Json:
    request = body.get("request") if "request" in body else body
    return request if isinstance(request, dict) else {}


def _get(obj: Json, camel: str) -> Any:
    """A field in either spelling, for telemetry (never raises; camelCase first)."""
    value = obj.get(camel)
    return obj.get(_snake(camel)) if value is None else value


def _modality(mime: str | None) -> str:
    kind = (mime or "").split("/", 1)[0].lower()
    return kind if kind in ("image", "video", "audio") else "document"


def _content_part(part: Json) -> Json:
    """One Gemini part in the conventions' shape."""
    text = part.get("text")
    if isinstance(text, str):
        return parts.reasoning(text) if part.get("thought") is True else parts.text(text)
    inline = _get(part, "inlineData")
    if isinstance(inline, dict):
        mime = str_or_none(_get(inline, "mimeType"))
        return parts.blob(_modality(mime), str_or_none(inline.get("data")) or "", mime)
    file_data = _get(part, "fileData")
    if isinstance(file_data, dict):
        mime = str_or_none(_get(file_data, "mimeType"))
        return parts.uri(_modality(mime), str_or_none(_get(file_data, "fileUri")) or "", mime)
    call = _get(part, "functionCall")
    if isinstance(call, dict):
        name = str_or_none(call.get("name"))
        return parts.tool_call(str_or_none(call.get("id")), name, call.get("args"))
    response = _get(part, "functionResponse")
    if isinstance(response, dict):
        return parts.tool_call_response(str_or_none(response.get("id")), response.get("response"))
    for key in part:
        if key not in ("thought", "thoughtSignature", "thought_signature", "mediaResolution"):
            return parts.generic(_camel(key))
    return parts.generic("unknown")


def request_content(body: Json) -> RequestContent:
    """``contents`` as the conventions' messages (``model`` is ``assistant``; a
    content of function responses is ``tool``), ``systemInstruction`` as the
    system instructions, and the function declarations and hosted tools."""
    request = _request_of(body)
    contents = _get(request, "contents")
    messages: list[Json] | None = None
    if isinstance(contents, list):
        messages = []
        for content in objects(contents):
            found = [_content_part(p) for p in objects(content.get("parts"))]
            role = _ROLES.get(str_or_none(content.get("role")) or "user", "user")
            if found and found[0]["type"] == "tool_call_response":
                role = "tool"  # function responses (and a tool's image after them)
            messages.append(parts.message(role, found))
    system = _get(request, "systemInstruction")
    texts = objects(system.get("parts")) if isinstance(system, dict) else []
    instructions = [parts.text(p["text"]) for p in texts if isinstance(p.get("text"), str)]
    return RequestContent(messages, instructions or None, _tool_definitions(request))


def _tool_definitions(request: Json) -> list[Json] | None:
    tools = _get(request, "tools")
    if not isinstance(tools, list):
        return None
    found: list[Json] = []
    for tool in objects(tools):
        for key, value in tool.items():
            if _camel(key) != "functionDeclarations":
                found.append(parts.tool_definition(_camel(key), _camel(key)))
                continue
            for declaration in objects(value):
                schema = _get(declaration, "parametersJsonSchema")
                found.append(
                    parts.tool_definition(
                        "function",
                        str_or_none(declaration.get("name")) or "",
                        declaration.get("description"),
                        schema if schema is not None else declaration.get("parameters"),
                    )
                )
    return found


def response_content(body: Json) -> ResponseContent | None:
    """Each candidate as an output message, or ``None`` for a body without
    candidates (an error, a blocked prompt)."""
    body = unwrap(body)
    candidates = body.get("candidates") if isinstance(body, dict) else None
    if not isinstance(candidates, list):
        return None
    messages: list[Json] = []
    for candidate in objects(candidates):
        found = [_content_part(p) for p in _candidate_parts(candidate)]
        called = any(p["type"] == "tool_call" for p in found)
        reason = _finish(str_or_none(candidate.get("finishReason")), called)
        messages.append(parts.output_message(found, reason))
    return ResponseContent(messages)


#: ``gen_ai.output.type`` of the response MIME types.
_OUTPUT_TYPES: Final = {"application/json": "json", "text/plain": "text"}


def _settings(config: Json) -> RequestSettings:
    mime = str_or_none(_get(config, "responseMimeType"))
    return RequestSettings(
        max_tokens=whole_number(_get(config, "maxOutputTokens")),
        temperature=number(_get(config, "temperature")),
        top_p=number(_get(config, "topP")),
        top_k=number(_get(config, "topK")),
        stop_sequences=string_list(_get(config, "stopSequences")),
        seed=whole_number(_get(config, "seed")),
        frequency_penalty=number(_get(config, "frequencyPenalty")),
        presence_penalty=number(_get(config, "presencePenalty")),
        choice_count=whole_number(_get(config, "candidateCount")),
        output_type=_OUTPUT_TYPES.get(mime.lower()) if mime else None,
    )


def request_settings(body: Json) -> RequestSettings:
    """The ``generationConfig`` settings sent (either spelling)."""
    config = _get(_request_of(body), "generationConfig")
    return _settings(config) if isinstance(config, dict) else RequestSettings()


def usage_totals(usage: Usage) -> Usage:
    """``promptTokenCount`` already counts cached tokens; output adds the
    thoughts, which ``candidatesTokenCount`` leaves out."""
    if usage.output_tokens is None or usage.reasoning_tokens is None:
        return usage
    return Usage(
        usage.input_tokens,
        usage.output_tokens + usage.reasoning_tokens,
        usage.total_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    )
