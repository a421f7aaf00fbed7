"""OpenTelemetry spans: the waterfall of a run (SPEC section 5).

This is the only module of the package that imports OpenTelemetry. The addon
hands it timestamps (epoch nanoseconds; converting monotonic clocks is the
caller's job) and the records it already built; this module turns them into
spans and ships them over OTLP. Spans are for looking: nothing here is
evidence, and nothing here may delay, fail or drop traffic.

Trace layout::

    session s1                      INTERNAL, trace id = session_trace_id(run, s1)
     ├── chat gpt-5                 CLIENT, one per exchange (GenAI attributes)
     │    ├── wait upstream         forwarded -> upstream's first byte
     │    └── stream | receive      first byte -> end (``stream`` if it streamed)
     └── websocket /openai/v1/responses     CLIENT, one per WebSocket connection
          └── chat gpt-5            one per ``response.create``, phases as above

Why a session root span, with a trace id derived from the session: Jaeger
names a trace after its root and draws the waterfall from it, so a trace made
of sibling root spans reads badly and a trace whose spans all point at a parent
that never arrives is flagged as broken. A real root, ``session {id}``, starts
with the session's first exchange and ends when :meth:`Telemetry.end_session`
is called (or at :meth:`Telemetry.shutdown`, stamped with the end of the
session's last exchange, so it never stretches to the exit time). Its trace id
is the first 16 bytes of ``sha256(run_id NUL session_id)``, so anyone holding an
audit line can compute the trace to open (:func:`session_trace_id`), and
several proxy processes sharing a run id put one session in one trace. The cost
is that the root span is exported when the session ends: until then Jaeger
shows the exchanges without their parent.

When the client sends ``traceparent``, the exchange (or WebSocket connection)
span becomes a child of that remote context instead, so it sits in the agent's
own trace; no session root is made for it. Sampling is ``ALWAYS_ON`` on
purpose: an unsampled parent must not hide audited exchanges from the
waterfall.

Export never touches traffic: spans go through a bounded
:class:`~opentelemetry.sdk.trace.export.BatchSpanProcessor` whose worker thread
does the network I/O, each export is bounded by a short timeout, and
:meth:`Telemetry.shutdown` gives up after its own deadline. Dropped spans are
counted as *ended minus successfully exported*: the SDK counts queue-full drops
only in its opt-in internal metrics, so a wrapping span processor counts spans
ended and a wrapping exporter counts spans the collector accepted. That single
difference covers a full queue, failed exports and spans still queued when
shutdown gave up.

Content (prompts, outputs) goes into spans only with ``capture_content``,
decided once at configuration. Secrets never do: no headers are read here, and
paths are redacted.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import openai_attributes
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    server_attributes,
)
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.re import parse_env_headers

from modeltap import __version__
from modeltap.records import (
    API_ANTHROPIC,
    API_CHAT,
    API_RESPONSES,
    AuditRecord,
    ErrorEvent,
    ResponseEvent,
    redact_path,
)

__all__ = [
    "ConnectionSpan",
    "ExchangeSpan",
    "ExportTarget",
    "SpanStats",
    "Telemetry",
    "capture_content_from_env",
    "resolve_export_target",
    "session_trace_id",
]

_logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# Attribute names. Constants come from opentelemetry-semantic-conventions where
# the installed version has them; the GenAI conventions moved to their own
# repository (semantic-conventions-genai) and renamed or added the ones below
# after the installed package was cut, so they are spelled out here, exactly as
# SPEC section 5 lists them.

OPERATION_NAME: Final = gen_ai.GEN_AI_OPERATION_NAME
PROVIDER_NAME: Final = gen_ai.GEN_AI_PROVIDER_NAME
REQUEST_MODEL: Final = gen_ai.GEN_AI_REQUEST_MODEL
REQUEST_STREAM: Final = gen_ai.GEN_AI_REQUEST_STREAM
REQUEST_REASONING_LEVEL: Final = "gen_ai.request.reasoning.level"
REQUEST_PREVIOUS_RESPONSE_ID: Final = "gen_ai.request.previous_response.id"
RESPONSE_MODEL: Final = gen_ai.GEN_AI_RESPONSE_MODEL
RESPONSE_ID: Final = gen_ai.GEN_AI_RESPONSE_ID
RESPONSE_FINISH_REASONS: Final = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
RESPONSE_TIME_TO_FIRST_CHUNK: Final = gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
USAGE_INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
USAGE_OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
USAGE_CACHE_READ_INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
# Installed semconv still says "cache_creation"; the current GenAI conventions
# (and the SPEC) say "cache_write".
USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
INPUT_MESSAGES: Final = gen_ai.GEN_AI_INPUT_MESSAGES
OUTPUT_MESSAGES: Final = gen_ai.GEN_AI_OUTPUT_MESSAGES
SYSTEM_INSTRUCTIONS: Final = gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS
OPENAI_API_TYPE: Final = openai_attributes.OPENAI_API_TYPE
SERVER_ADDRESS: Final = server_attributes.SERVER_ADDRESS
SERVER_PORT: Final = server_attributes.SERVER_PORT
HTTP_RESPONSE_STATUS_CODE: Final = http_attributes.HTTP_RESPONSE_STATUS_CODE
ERROR_TYPE: Final = error_attributes.ERROR_TYPE

MODELTAP_SEQ: Final = "modeltap.seq"
MODELTAP_REQUEST_ID: Final = "modeltap.request_id"
MODELTAP_SESSION_ID: Final = "modeltap.session_id"
MODELTAP_RUN_ID: Final = "modeltap.run_id"
MODELTAP_INSTRUCTIONS_SHA256: Final = "modeltap.instructions_sha256"
MODELTAP_WS_CLOSE_CODE: Final = "modeltap.websocket.close_code"

#: Every API modeltap audits is a chat-style generation; the current GenAI
#: conventions use ``chat`` for OpenAI Responses as well as Chat Completions.
OPERATION_CHAT: Final = "chat"

_PROVIDERS: Final[dict[str, str]] = {
    API_CHAT: "openai",
    API_RESPONSES: "openai",
    API_ANTHROPIC: "anthropic",
}
_OPENAI_API_TYPES: Final[dict[str, str]] = {
    API_CHAT: "chat_completions",
    API_RESPONSES: "responses",
}

#: error.type of spans still open when telemetry shut down (Ctrl-C mid-stream).
ERROR_INTERRUPTED: Final = "modeltap.interrupted"
#: Longest captured content per attribute; Jaeger struggles with huge tags.
CONTENT_LIMIT: Final = 64 * 1024

_GRPC_PORT: Final = 4317
_NO_ENDPOINT: Final = "not exported (no OTLP endpoint; set --otlp or OTEL_EXPORTER_OTLP_ENDPOINT)"

OtlpProtocol = Literal["http/protobuf", "grpc"]


def _never_raises[**P](func: Callable[P, None]) -> Callable[P, None]:
    """Make a telemetry entry point log and swallow its own failures.

    A span is never worth an exchange: the addon calls these methods on the
    traffic path, so a bug here must cost a span, not a request.
    """

    @functools.wraps(func)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            func(*args, **kwargs)
        except Exception:
            _logger.exception("telemetry: %s failed; the span may be incomplete", func.__name__)

    return guarded


# --------------------------------------------------------------------------
# Pure helpers


@dataclass(frozen=True, slots=True)
class ExportTarget:
    """Where spans go.

    Attributes:
        protocol: ``"http/protobuf"`` or ``"grpc"``.
        endpoint: for HTTP the full traces URL (``.../v1/traces``); for gRPC an
            ``http://`` (plaintext) or ``https://`` (TLS) URL of the collector.
        headers: extra export headers from ``OTEL_EXPORTER_OTLP[_TRACES]_HEADERS``
            (collector credentials; never shown by :meth:`describe`).
    """

    protocol: OtlpProtocol
    endpoint: str
    headers: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """Return ``OTLP/HTTP -> URL`` or ``OTLP/gRPC -> URL``, without credentials."""
        kind = "OTLP/HTTP" if self.protocol == "http/protobuf" else "OTLP/gRPC"
        return f"{kind} -> {_without_userinfo(self.endpoint)}"


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _env(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def resolve_export_target(otlp: str | None, environ: Mapping[str, str]) -> ExportTarget | None:
    """Decide where spans go, from ``--otlp`` or the standard variables.

    The ``--otlp URL`` rule (the URL alone decides, ``OTEL_EXPORTER_OTLP_PROTOCOL``
    is ignored for it):

    - ``grpc://host:port`` -> OTLP/gRPC in plaintext; ``grpcs://`` -> gRPC over TLS;
    - ``http(s)://host:4317`` (the gRPC port) -> OTLP/gRPC, TLS for ``https``;
    - any other ``http(s)://`` URL -> OTLP/HTTP protobuf; a URL with no path gets
      ``/v1/traces``, a URL with a path is used as given.

    Without ``--otlp`` the OpenTelemetry variables apply as the specification
    says: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``
    (``http/protobuf`` by default, or ``grpc``); ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    is used as given, ``OTEL_EXPORTER_OTLP_ENDPOINT`` gets ``/v1/traces`` appended
    for HTTP. For gRPC an endpoint without a scheme is plaintext when
    ``OTEL_EXPORTER_OTLP[_TRACES]_INSECURE=true``, else TLS.

    Args:
        otlp: the ``--otlp`` value, or ``None``.
        environ: the process environment (or a stand-in).

    Returns:
        The target, or ``None`` when no endpoint is configured (no export).

    Raises:
        ValueError: the URL or protocol cannot be used (the message names the
            setting and what is accepted, so the addon can show it as is).
    """
    headers = tuple(
        parse_env_headers(
            _env(environ, "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            or _env(environ, "OTEL_EXPORTER_OTLP_HEADERS")
            or "",
            liberal=True,
        ).items()
    )
    if otlp is not None and otlp.strip():
        return _target_from_url(otlp.strip(), headers)

    protocol = (
        _env(environ, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or _env(environ, "OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; "
            "use 'http/protobuf' or 'grpc'"
        )
    signal_endpoint = _env(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base_endpoint = _env(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if signal_endpoint is None and base_endpoint is None:
        return None

    if protocol == "grpc":
        endpoint = signal_endpoint or base_endpoint or ""
        if "://" not in endpoint:
            insecure = (
                _env(environ, "OTEL_EXPORTER_OTLP_TRACES_INSECURE")
                or _env(environ, "OTEL_EXPORTER_OTLP_INSECURE")
                or "false"
            ).lower() == "true"
            endpoint = ("http://" if insecure else "https://") + endpoint
        _require_host(endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT", ("http", "https"))
        return ExportTarget("grpc", endpoint, headers)

    if signal_endpoint is not None:
        endpoint = signal_endpoint
    else:
        endpoint = (base_endpoint or "").rstrip("/") + "/v1/traces"
    _require_host(endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT", ("http", "https"))
    return ExportTarget("http/protobuf", endpoint, headers)


def _require_host(url: str, setting: str, schemes: tuple[str, ...]) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ValueError(f"{setting}: the port of {_without_userinfo(url)!r} is invalid") from None
    if parts.scheme not in schemes or not parts.hostname:
        accepted = " or ".join(f"{scheme}://HOST:PORT" for scheme in schemes)
        raise ValueError(f"{setting} must be a URL such as {accepted}")


def _target_from_url(url: str, headers: tuple[tuple[str, str], ...]) -> ExportTarget:
    _require_host(url, "--otlp", ("http", "https", "grpc", "grpcs"))
    parts = urlsplit(url)
    if parts.scheme in ("grpc", "grpcs"):
        scheme = "http" if parts.scheme == "grpc" else "https"
        return ExportTarget("grpc", urlunsplit((scheme, parts.netloc, "", "", "")), headers)
    if parts.port == _GRPC_PORT:
        return ExportTarget("grpc", urlunsplit((parts.scheme, parts.netloc, "", "", "")), headers)
    if parts.path in ("", "/"):
        url = urlunsplit(parts._replace(path="/v1/traces"))
    return ExportTarget("http/protobuf", url, headers)


def capture_content_from_env(environ: Mapping[str, str]) -> bool:
    """Read ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.

    ``true`` turns capture on; so do ``span_only`` and ``span_and_event``, the
    values newer GenAI instrumentations accept. Anything else is off.
    """
    value = (_env(environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") or "").lower()
    return value in ("true", "span_only", "span_and_event")


def _session_trace_id_int(run_id: str, session_id: str) -> int:
    digest = hashlib.sha256(f"{run_id}\x00{session_id}".encode()).digest()
    # An all-zero trace id is invalid; a sha256 prefix of zero is not going to
    # happen, but the fallback keeps the id valid by construction.
    return int.from_bytes(digest[:16], "big") or 1


def session_trace_id(run_id: str, session_id: str) -> str:
    """Return the trace id (32 hex digits) of a session's spans.

    It is the first 16 bytes of ``sha256(run_id + "\\0" + session_id)``, so a
    report can link an audit line to its trace in Jaeger.
    """
    return f"{_session_trace_id_int(run_id, session_id):032x}"


def _server_address(upstream: str) -> tuple[str | None, int | None]:
    """Host and port of an upstream URL (default port by scheme); unknown is ``None``."""
    try:
        parts = urlsplit(upstream)
        port = parts.port
    except ValueError:
        return None, None
    if port is None:
        port = {"https": 443, "http": 80, "wss": 443, "ws": 80}.get(parts.scheme)
    return parts.hostname or None, port


def _parent_from_traceparent(traceparent: str | None) -> Context | None:
    """The remote context a ``traceparent`` header names, or ``None`` if absent/invalid."""
    if not traceparent:
        return None
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def _clip(text: str) -> str:
    if len(text) <= CONTENT_LIMIT:
        return text
    return text[:CONTENT_LIMIT] + f"... [truncated {len(text) - CONTENT_LIMIT} characters]"


def _json_text(value: object) -> str:
    return _clip(orjson.dumps(value).decode())


def _parse_object(content: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _request_content(api: str, content: bytes) -> dict[str, str]:
    """Content attributes for a request body, in the provider's own shape.

    The messages are kept as the provider's JSON (not re-modelled into the
    GenAI "parts" schema): simple, exact, and enough to read in Jaeger.
    """
    body = _parse_object(content)
    if body is None:
        return {INPUT_MESSAGES: _clip(content.decode("utf-8", "replace"))}
    attributes: dict[str, str] = {}
    messages = body.get("input") if api == API_RESPONSES else body.get("messages")
    if messages is not None:
        attributes[INPUT_MESSAGES] = _json_text(messages)
    system = body.get("instructions") if api == API_RESPONSES else body.get("system")
    if system is not None and api != API_CHAT:
        attributes[SYSTEM_INSTRUCTIONS] = _json_text(system)
    return attributes


def _response_content(api: str | None, content: bytes) -> str:
    """The ``gen_ai.output.messages`` value for a response body.

    JSON bodies give their output part (chat ``choices``, Responses ``output``,
    Anthropic ``content``; a WebSocket ``response.*`` event's ``response.output``).
    Anything else, such as a raw SSE stream, is kept as text.
    """
    body = _parse_object(content)
    if body is None:
        return _clip(content.decode("utf-8", "replace"))
    if isinstance(body.get("response"), dict):
        body = body["response"]
    key = {API_CHAT: "choices", API_RESPONSES: "output", API_ANTHROPIC: "content"}.get(api or "")
    if key is not None and key in body:
        return _json_text(body[key])
    return _json_text(body)


# --------------------------------------------------------------------------
# Export plumbing


class _SessionIdGenerator(IdGenerator):
    """Random ids, except that a session root takes the trace id it is handed.

    The SDK gives no way to choose a root span's trace id other than its id
    generator, so :meth:`Telemetry._session_root` sets :attr:`forced_trace_id`
    for the duration of one ``start_span`` call.
    """

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.forced_trace_id: ContextVar[int | None] = ContextVar(
            "modeltap_forced_trace_id", default=None
        )

    def generate_span_id(self) -> int:
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self.forced_trace_id.get() or self._random.generate_trace_id()


@dataclass(frozen=True, slots=True)
class SpanStats:
    """Span counts at a point in time.

    Attributes:
        ended: spans modeltap finished (each was handed to the batch processor).
        exported: spans the collector accepted.
        failed: spans in exports that failed (collector down, timeout, refusal).
        dropped: spans that will not reach the collector: ``ended - exported``
            (failed exports, a full queue, or still queued when shutdown gave up).
    """

    ended: int
    exported: int
    failed: int

    @property
    def dropped(self) -> int:
        """Spans ended but not exported."""
        return max(0, self.ended - self.exported)


class _CountingExporter(SpanExporter):
    """Counts what the real exporter delivered, and stops trying past a deadline."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0
        #: Set by shutdown: after it, batches are failed at once instead of
        #: waiting out a dead collector batch by batch.
        self.give_up_at: float | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.give_up_at is not None and time.monotonic() >= self.give_up_at:
            result = SpanExportResult.FAILURE
        else:
            try:
                result = self._inner.export(spans)
            except Exception:
                _logger.debug("telemetry: span export raised", exc_info=True)
                result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
                return result
            first_failure = self.failed == 0
            self.failed += len(spans)
        if first_failure and self.give_up_at is None:
            # Once, not per batch: a dead collector must not flood the console.
            _logger.warning("spans: export failed; spans are dropped and counted until it recovers")
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingProcessor(SpanProcessor):
    """Counts ended spans on their way into the batch processor."""

    def __init__(self, inner: SpanProcessor) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _build_exporter(target: ExportTarget, timeout: float) -> SpanExporter:
    headers = dict(target.headers) or None
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=target.endpoint,
            insecure=target.endpoint.startswith("http://"),
            headers=headers,
            timeout=timeout,
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(endpoint=target.endpoint, headers=headers, timeout=timeout)


@dataclass(slots=True)
class _SessionRoot:
    span: trace.Span
    context: Context
    last_end_ns: int
    ended: bool = False


# --------------------------------------------------------------------------
# The public objects


class Telemetry:
    """Tracer setup and span building for one modeltap run.

    Build it with :meth:`configure`. It owns a private ``TracerProvider`` (the
    global one is never set, so an embedding process keeps its own) and works
    as a no-op when no endpoint is configured.
    """

    def __init__(
        self,
        *,
        target: ExportTarget | None,
        capture_content: bool,
        run_id: str,
        service_name: str = "modeltap",
        resource_attributes: Mapping[str, str] | None = None,
        export_timeout: float = 3.0,
        shutdown_timeout: float = 5.0,
        max_queue_size: int = 2048,
    ) -> None:
        """Prefer :meth:`configure`; this takes already resolved settings."""
        self.target = target
        self.capture_content = capture_content
        self.run_id = run_id
        self._shutdown_timeout = shutdown_timeout
        self._lock = threading.Lock()
        self._sessions: dict[str, _SessionRoot] = {}
        self._open: dict[int, ExchangeSpan | ConnectionSpan] = {}
        self._summary: str | None = None
        self._ids = _SessionIdGenerator()
        self._exporter: _CountingExporter | None = None
        self._processor: _CountingProcessor | None = None
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer | None = None
        if target is None:
            return
        self._exporter = _CountingExporter(_build_exporter(target, export_timeout))
        batch = BatchSpanProcessor(
            self._exporter,
            max_queue_size=max_queue_size,
            # Spans should show up in Jaeger while the run goes on.
            schedule_delay_millis=1000,
            max_export_batch_size=min(512, max_queue_size),
        )
        self._processor = _CountingProcessor(batch)
        resource = Resource(
            {
                **(resource_attributes or {}),
                "service.name": service_name,
                "service.version": __version__,
            }
        )
        self._provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=resource,
            id_generator=self._ids,
            # modeltap flushes in its own shutdown, with a deadline; the SDK's
            # exit hook would wait up to 30 s on a dead collector.
            shutdown_on_exit=False,
        )
        self._provider.add_span_processor(self._processor)
        self._tracer = self._provider.get_tracer("modeltap", __version__)

    @classmethod
    def configure(
        cls,
        *,
        otlp: str | None,
        capture_content: bool | None,
        service_name: str = "modeltap",
        environ: Mapping[str, str] | None = None,
        run_id: str = "",
        export_timeout: float = 3.0,
        shutdown_timeout: float = 5.0,
        max_queue_size: int = 2048,
    ) -> Telemetry:
        """Turn options and environment into a ready :class:`Telemetry`.

        Args:
            otlp: the ``--otlp`` URL, or ``None`` for the ``OTEL_EXPORTER_OTLP_*``
                variables (see :func:`resolve_export_target` for the rule).
            capture_content: ``--capture-content``; ``None`` reads
                ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
            service_name: ``service.name`` of the spans; ``OTEL_SERVICE_NAME``
                wins over the default. ``OTEL_RESOURCE_ATTRIBUTES`` is added.
            environ: the environment to read (default ``os.environ``).
            run_id: the run's id, part of each session's trace id.
            export_timeout: seconds one export may take (retries included).
            shutdown_timeout: seconds :meth:`shutdown` may take in all.
            max_queue_size: spans buffered before new ones are dropped.

        Returns:
            A :class:`Telemetry`; a no-op one when there is no endpoint.

        Raises:
            ValueError: an unusable ``--otlp`` URL or OTLP variable.
        """
        if environ is None:
            environ = os.environ
        target = resolve_export_target(otlp, environ)
        if capture_content is None:
            capture_content = capture_content_from_env(environ)
        resource_attributes = parse_env_headers(
            _env(environ, "OTEL_RESOURCE_ATTRIBUTES") or "", liberal=True
        )
        if service_name == "modeltap":
            service_name = _env(environ, "OTEL_SERVICE_NAME") or service_name
        return cls(
            target=target,
            capture_content=capture_content,
            run_id=run_id,
            service_name=service_name,
            resource_attributes=resource_attributes,
            export_timeout=export_timeout,
            shutdown_timeout=shutdown_timeout,
            max_queue_size=max_queue_size,
        )

    @property
    def enabled(self) -> bool:
        """Whether spans are being made and exported (false without endpoint or after shutdown)."""
        return self._tracer is not None

    def describe(self) -> str:
        """One line for the start-up screen: where spans go."""
        if self.target is None:
            return f"spans: {_NO_ENDPOINT}"
        capture = ", prompt and output content captured" if self.capture_content else ""
        return f"spans: {self.target.describe()}{capture}"

    def stats(self) -> SpanStats:
        """Span counts so far (exact once :meth:`shutdown` returned)."""
        if self._processor is None or self._exporter is None:
            return SpanStats(0, 0, 0)
        return SpanStats(self._processor.ended, self._exporter.exported, self._exporter.failed)

    # -- span factories --------------------------------------------------------

    def _session_root(self, session_id: str, start_ns: int) -> _SessionRoot:
        assert self._tracer is not None
        with self._lock:
            root = self._sessions.get(session_id)
            if root is not None:
                return root
            token = self._ids.forced_trace_id.set(_session_trace_id_int(self.run_id, session_id))
            try:
                span = self._tracer.start_span(
                    f"session {session_id}",
                    context=Context(),
                    kind=SpanKind.INTERNAL,
                    attributes={MODELTAP_SESSION_ID: session_id, MODELTAP_RUN_ID: self.run_id}
                    if self.run_id
                    else {MODELTAP_SESSION_ID: session_id},
                    start_time=start_ns,
                )
            finally:
                self._ids.forced_trace_id.reset(token)
            root = _SessionRoot(span, trace.set_span_in_context(span), start_ns)
            self._sessions[session_id] = root
            return root

    def _parent(
        self, session_id: str, traceparent: str | None, start_ns: int
    ) -> tuple[Context, _SessionRoot | None]:
        remote = _parent_from_traceparent(traceparent)
        if remote is not None:
            return remote, None
        root = self._session_root(session_id, start_ns)
        return root.context, root

    def _track(self, span: ExchangeSpan | ConnectionSpan) -> None:
        with self._lock:
            self._open[id(span)] = span

    def _untrack(self, span: ExchangeSpan | ConnectionSpan, root: _SessionRoot | None) -> None:
        with self._lock:
            self._open.pop(id(span), None)
            if root is not None:
                root.last_end_ns = max(root.last_end_ns, span.end_ns or 0)

    @_never_raises
    def _start_exchange_span(
        self,
        exchange: ExchangeSpan,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        parent: ConnectionSpan | None,
    ) -> None:
        assert self._tracer is not None
        root: _SessionRoot | None = None
        if parent is not None and parent._span is not None:
            context = trace.set_span_in_context(parent._span)
        else:
            context, root = self._parent(session_id, traceparent, start_ns)
        exchange._span = self._tracer.start_span(
            OPERATION_CHAT,
            context=context,
            kind=SpanKind.CLIENT,
            attributes={OPERATION_NAME: OPERATION_CHAT, MODELTAP_SESSION_ID: session_id},
            start_time=start_ns,
        )
        exchange._root = root
        self._track(exchange)

    def start_exchange(
        self,
        *,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        transport: str = "http",
        parent: ConnectionSpan | None = None,
    ) -> ExchangeSpan:
        """Open the span of one exchange (an HTTP request or a ``response.create``).

        Args:
            session_id: the session (section 5); picks the trace.
            traceparent: the client's ``traceparent`` header, if sent; the span
                then joins that trace. Ignored when ``parent`` is given.
            start_ns: when the request arrived (epoch ns).
            transport: ``http`` or ``websocket``.
            parent: the WebSocket connection this message came on.

        Returns:
            The exchange's span; call :meth:`ExchangeSpan.finish` exactly once.
        """
        exchange = ExchangeSpan(self, start_ns=start_ns, transport=transport)
        if self._tracer is not None:
            self._start_exchange_span(exchange, session_id, traceparent, start_ns, parent)
        return exchange

    @_never_raises
    def _start_connection_span(
        self,
        connection: ConnectionSpan,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        path: str,
        upstream: str,
    ) -> None:
        assert self._tracer is not None
        context, root = self._parent(session_id, traceparent, start_ns)
        address, port = _server_address(upstream)
        attributes: dict[str, str | int] = {MODELTAP_SESSION_ID: session_id}
        if address is not None:
            attributes[SERVER_ADDRESS] = address
        if port is not None:
            attributes[SERVER_PORT] = port
        # The query string never goes into a span name (it is unbounded and
        # may carry a key); the path itself is redacted all the same.
        connection._span = self._tracer.start_span(
            f"websocket {redact_path(path).split('?', 1)[0]}",
            context=context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=start_ns,
        )
        connection._root = root
        self._track(connection)

    def start_connection(
        self,
        *,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        path: str,
        upstream: str,
    ) -> ConnectionSpan:
        """Open the span of one WebSocket connection.

        Each ``response.create`` on it gets its own exchange span through
        ``start_exchange(parent=connection, transport="websocket")``.

        Args:
            session_id: the session the connection belongs to.
            traceparent: the handshake's ``traceparent``, if sent.
            start_ns: when the handshake arrived (epoch ns).
            path: the handshake's path (query strings are left out of the name).
            upstream: the upstream base URL, for ``server.address``/``server.port``.

        Returns:
            The connection's span; call :meth:`ConnectionSpan.finish` once.
        """
        connection = ConnectionSpan(self)
        if self._tracer is not None:
            self._start_connection_span(
                connection, session_id, traceparent, start_ns, path, upstream
            )
        return connection

    @_never_raises
    def end_session(self, session_id: str, *, end_ns: int | None = None) -> None:
        """End a session's root span (when the session ends, e.g. its socket closed).

        Args:
            session_id: the session.
            end_ns: when it ended; default the end of its last finished span.
        """
        with self._lock:
            root = self._sessions.get(session_id)
            if root is None or root.ended:
                return
            root.ended = True
            # Forget it: memory stays bounded over many sessions. A late
            # exchange of this session starts a new root in the same trace.
            del self._sessions[session_id]
            root.span.end(end_time=end_ns if end_ns is not None else root.last_end_ns)

    def shutdown(self, *, end_ns: int | None = None) -> str:
        """End open spans, flush, and stop exporting, within ``shutdown_timeout``.

        Spans still open (an exchange cut short by Ctrl-C) are ended at
        ``end_ns`` (default now) with ``error.type`` ``modeltap.interrupted``;
        session roots are ended at their last exchange's end. Safe to call twice.

        Returns:
            One line for the exit screen, e.g.
            ``spans: 12 exported, 0 dropped (OTLP/HTTP -> http://...)``.
        """
        if self._summary is not None:
            return self._summary
        if self._provider is None or self._exporter is None:
            self._summary = f"spans: {_NO_ENDPOINT}"
            return self._summary
        deadline = time.monotonic() + self._shutdown_timeout
        self._end_leftovers(end_ns if end_ns is not None else time.time_ns())
        # From here on new exchanges get no-op spans: nothing would export them.
        self._tracer = None
        provider, exporter = self._provider, self._exporter
        # The batch processor's own shutdown joins its worker for up to 30 s
        # and cannot be told otherwise; run it aside and stop waiting at our
        # deadline. Past the deadline the exporter fails batches at once, so
        # the worker drains instead of timing out batch by batch.
        exporter.give_up_at = deadline
        worker = threading.Thread(
            target=provider.shutdown, name="modeltap-telemetry-shutdown", daemon=True
        )
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()) + 0.5)
        stats = self.stats()
        assert self.target is not None
        if stats.dropped:
            unsent = max(0, stats.dropped - stats.failed)
            detail = f"{stats.dropped} dropped ({stats.failed} in failed exports, {unsent} unsent)"
        else:
            detail = "0 dropped"
        self._summary = f"spans: {stats.exported} exported, {detail} ({self.target.describe()})"
        return self._summary

    @_never_raises
    def _end_leftovers(self, end_ns: int) -> None:
        with self._lock:
            leftovers = list(self._open.values())
        for span in leftovers:
            span._interrupt(end_ns)
        with self._lock:
            roots = [root for root in self._sessions.values() if not root.ended]
            for root in roots:
                root.ended = True
                root.span.end(end_time=root.last_end_ns)


class ExchangeSpan:
    """The span of one exchange, filled in as the exchange goes.

    Every method is cheap and never raises; on a no-op :class:`Telemetry`
    they do nothing. Phase child spans are made in :meth:`finish`, from the
    timestamps handed in on the way.
    """

    def __init__(self, telemetry: Telemetry, *, start_ns: int, transport: str) -> None:
        self._telemetry = telemetry
        self._span: trace.Span | None = None
        self._root: _SessionRoot | None = None
        self.start_ns = start_ns
        self.transport = transport
        self.end_ns: int | None = None
        self._record: AuditRecord | None = None
        self._forwarded_ns: int | None = None
        self._first_byte_ns: int | None = None
        self._first_chunk_ns: int | None = None

    @_never_raises
    def audited(
        self,
        record: AuditRecord,
        content: bytes | None = None,
        *,
        forwarded_ns: int | None = None,
    ) -> None:
        """Name the span and set the request attributes from the audit record.

        Args:
            record: the record just written for this request.
            content: the decoded request body; used only with content capture.
            forwarded_ns: when the request went upstream (epoch ns); starts the
                ``wait upstream`` phase. Default: the exchange's start.
        """
        span = self._span
        if span is None or self.end_ns is not None:
            return
        span.update_name(f"{OPERATION_CHAT} {record.model}")
        address, port = _server_address(record.upstream)
        attributes: dict[str, str | int | bool | None] = {
            PROVIDER_NAME: _PROVIDERS.get(record.api),
            REQUEST_MODEL: record.model,
            REQUEST_STREAM: record.stream,
            REQUEST_REASONING_LEVEL: record.reasoning_effort,
            REQUEST_PREVIOUS_RESPONSE_ID: record.previous_response_id,
            OPENAI_API_TYPE: _OPENAI_API_TYPES.get(record.api),
            SERVER_ADDRESS: address,
            SERVER_PORT: port,
            MODELTAP_SEQ: record.seq,
            MODELTAP_REQUEST_ID: record.request_id,
            MODELTAP_SESSION_ID: record.session_id,
            MODELTAP_INSTRUCTIONS_SHA256: record.instructions_sha256,
        }
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})
        # Kept only once the record proved usable, so finish() can rely on it.
        self._record = record
        self._forwarded_ns = forwarded_ns
        if content is not None and self._telemetry.capture_content:
            span.set_attributes(_request_content(record.api, content))

    def upstream_first_byte(self, t_ns: int) -> None:
        """The upstream's first byte arrived: ``wait upstream`` ends, the rest begins."""
        if self._first_byte_ns is None:
            self._first_byte_ns = t_ns

    def first_chunk(self, t_ns: int) -> None:
        """The first content chunk arrived (sets ``gen_ai.response.time_to_first_chunk``)."""
        if self._first_chunk_ns is None:
            self._first_chunk_ns = t_ns

    @_never_raises
    def finish(
        self,
        *,
        end_ns: int,
        response: ResponseEvent | None = None,
        error: ErrorEvent | None = None,
        rejected_rule: str | None = None,
        status_code: int | None = None,
        content: bytes | None = None,
    ) -> None:
        """Set the outcome, build the phase spans and end the span. Only the first call counts.

        Args:
            end_ns: when the exchange ended (epoch ns).
            response: what came back, if anything was observed.
            error: what broke (upstream unreachable, reset, client gone).
            rejected_rule: the refusal rule when modeltap refused the request.
            status_code: the HTTP status the client got (else ``response.status``).
            content: the decoded response body; used only with content capture.

        The span's status is ERROR, with ``error.type``, when the request was
        refused (the rule name), broke (``error.error``), the response failed
        (``response.failed``) or the status is 4xx/5xx (the code).
        """
        self._close(end_ns, response, error, rejected_rule, status_code, content, interrupted=False)

    def _close(
        self,
        end_ns: int,
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
        content: bytes | None,
        *,
        interrupted: bool,
    ) -> None:
        span = self._span
        if span is None or self.end_ns is not None:
            return
        self.end_ns = end_ns
        try:
            self._outcome(
                span, end_ns, response, error, rejected_rule, status_code, content, interrupted
            )
        finally:
            # Whatever went wrong above, the span ends and stops being tracked.
            span.end(end_time=end_ns)
            self._telemetry._untrack(self, self._root)

    def _outcome(
        self,
        span: trace.Span,
        end_ns: int,
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
        content: bytes | None,
        interrupted: bool,
    ) -> None:
        """Set the response attributes and status, and build the phase spans."""
        attributes: dict[str, Any] = {}
        if status_code is None and response is not None:
            status_code = response.status
        attributes[HTTP_RESPONSE_STATUS_CODE] = status_code
        if response is not None:
            usage = response.usage
            attributes |= {
                RESPONSE_MODEL: response.model,
                RESPONSE_ID: response.response_id,
                USAGE_INPUT_TOKENS: usage.input_tokens,
                USAGE_OUTPUT_TOKENS: usage.output_tokens,
                USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
                USAGE_CACHE_WRITE_INPUT_TOKENS: usage.cache_write_tokens,
                USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens,
                RESPONSE_FINISH_REASONS: (
                    list(response.finish_reasons) if response.finish_reasons is not None else None
                ),
            }
        if self._first_chunk_ns is not None:
            attributes[RESPONSE_TIME_TO_FIRST_CHUNK] = (self._first_chunk_ns - self.start_ns) / 1e9
        elif response is not None and response.ttft_ms is not None:
            attributes[RESPONSE_TIME_TO_FIRST_CHUNK] = response.ttft_ms / 1000.0

        error_type = (
            ERROR_INTERRUPTED
            if interrupted
            else self._error_type(response, error, rejected_rule, status_code)
        )
        attributes[ERROR_TYPE] = error_type
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})
        if self._first_chunk_ns is not None:
            span.add_event("first chunk", timestamp=self._first_chunk_ns)
        if content is not None and self._telemetry.capture_content:
            api = self._record.api if self._record is not None else None
            span.set_attribute(OUTPUT_MESSAGES, _response_content(api, content))
        if error_type is not None:
            # The description is the error's class only: messages can hold
            # upstream text, and secrets must never reach a span.
            span.set_status(Status(StatusCode.ERROR, error_type))
        if rejected_rule is None:
            self._phases(span, end_ns, error_type)

    @staticmethod
    def _error_type(
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
    ) -> str | None:
        if rejected_rule is not None:
            return rejected_rule
        if error is not None:
            return error.error
        if response is not None and response.response_status == "failed":
            return "response.failed"
        if status_code is not None and status_code >= 400:
            return str(status_code)
        return None

    def _phases(self, span: trace.Span, end_ns: int, error_type: str | None) -> None:
        """Child spans for the phases: ``wait upstream``, then ``stream`` or ``receive``."""
        if self._record is None and self._first_byte_ns is None:
            return  # never forwarded: there is no phase to show
        tracer = self._telemetry._tracer
        if tracer is None:
            return  # shut down meanwhile
        context = trace.set_span_in_context(span)
        wait_start = self._forwarded_ns if self._forwarded_ns is not None else self.start_ns
        first_byte = self._first_byte_ns
        phases: list[tuple[str, int, int]] = []
        if first_byte is None:
            phases.append(("wait upstream", wait_start, end_ns))
        else:
            streamed = self._record.stream if self._record is not None else False
            phases.append(("wait upstream", wait_start, max(wait_start, first_byte)))
            phases.append(
                ("stream" if streamed else "receive", first_byte, max(first_byte, end_ns))
            )
        for index, (name, start, end) in enumerate(phases):
            phase = tracer.start_span(
                name, context=context, kind=SpanKind.INTERNAL, start_time=start
            )
            if error_type is not None and index == len(phases) - 1:
                phase.set_status(Status(StatusCode.ERROR, error_type))
            phase.end(end_time=end)

    @_never_raises
    def _interrupt(self, end_ns: int) -> None:
        """End a span left open at shutdown, marked ``modeltap.interrupted``."""
        end_ns = max(end_ns, self.start_ns)
        self._close(end_ns, None, None, None, None, None, interrupted=True)


class ConnectionSpan:
    """The span of one WebSocket connection; its messages' spans are its children."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry
        self._span: trace.Span | None = None
        self._root: _SessionRoot | None = None
        self.end_ns: int | None = None

    @_never_raises
    def finish(self, *, end_ns: int, code: int | None, error: str | None) -> None:
        """End the connection span. Only the first call counts.

        Args:
            end_ns: when the connection closed (epoch ns).
            code: the close code, if one was sent.
            error: an error class (e.g. ``upstream_reset``) if it ended badly;
                never a message, which could carry upstream text.
        """
        span = self._span
        if span is None or self.end_ns is not None:
            return
        self.end_ns = end_ns
        if code is not None:
            span.set_attribute(MODELTAP_WS_CLOSE_CODE, code)
        if error is not None:
            span.set_attribute(ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)
        self._telemetry._untrack(self, self._root)

    def _interrupt(self, end_ns: int) -> None:
        """End a connection left open at shutdown."""
        self.finish(end_ns=end_ns, code=None, error=ERROR_INTERRUPTED)
