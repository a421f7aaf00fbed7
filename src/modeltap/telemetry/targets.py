"""Where spans, metrics and log records go: the OTLP targets from ``--otlp`` or ``OTEL_*``.

Configuration only: these functions read a URL and an environment (a mapping,
so tests hand in their own) and say what to export to, or why the setting
cannot be used. Nothing here opens a connection. Spans, metrics and log
records share one configuration, as the OpenTelemetry specification lays it
out: the same ``--otlp`` URL or ``OTEL_EXPORTER_OTLP_ENDPOINT`` serves all
(``/v1/traces``, ``/v1/metrics`` and ``/v1/logs`` over HTTP), and the
per-signal variables (``OTEL_EXPORTER_OTLP_TRACES_*``, ``..._METRICS_*``,
``..._LOGS_*``) override it for one. ``OTEL_TRACES_EXPORTER=none`` (or
``METRICS``, ``LOGS``) turns one signal off. :func:`exporter_arguments` is what
each signal's official OTLP exporter is built with (the exporter connects
only when it first exports).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.util.re import parse_env_headers

__all__ = [
    "NO_ENDPOINT",
    "ExportTarget",
    "OtlpProtocol",
    "Signal",
    "capture_content_from_env",
    "env_value",
    "exporter_arguments",
    "resolve_export_target",
]

_GRPC_PORT: Final = 4317
#: What the start-up and exit screens say when spans go nowhere.
NO_ENDPOINT: Final = "not exported (no OTLP endpoint; set --otlp or OTEL_EXPORTER_OTLP_ENDPOINT)"

OtlpProtocol = Literal["http/protobuf", "grpc"]
#: An OTLP signal modeltap exports.
Signal = Literal["traces", "metrics", "logs"]


@dataclass(frozen=True, slots=True)
class ExportTarget:
    """Where one signal (spans or metrics) goes.

    Attributes:
        protocol: ``"http/protobuf"`` or ``"grpc"``.
        endpoint: for HTTP the full URL of the signal (``.../v1/traces``,
            ``.../v1/metrics``); for gRPC an ``http://`` (plaintext) or
            ``https://`` (TLS) URL of the collector.
        headers: extra export headers from ``OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_HEADERS``
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


def env_value(environ: Mapping[str, str], name: str) -> str | None:
    """An environment variable's value without surrounding blanks; ``None`` when unset or blank."""
    value = environ.get(name, "").strip()
    return value or None


def resolve_export_target(
    otlp: str | None, environ: Mapping[str, str], signal: Signal = "traces"
) -> ExportTarget | None:
    """Decide where one signal goes, from ``--otlp`` or the standard variables.

    The ``--otlp URL`` rule (the URL alone decides, ``OTEL_EXPORTER_OTLP_PROTOCOL``
    is ignored for it):

    - ``grpc://host:port`` -> OTLP/gRPC in plaintext; ``grpcs://`` -> gRPC over TLS;
    - ``http(s)://host:4317`` (the gRPC port) -> OTLP/gRPC, TLS for ``https``;
    - any other ``http(s)://`` URL -> OTLP/HTTP protobuf; a URL with no path gets
      ``/v1/traces`` (metrics: ``/v1/metrics``, logs: ``/v1/logs``), a URL with
      a path is the traces URL as given, and metrics and logs go beside it when
      it ends in ``/v1/traces`` (else, with no way to know where, nowhere: set
      ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` / ``..._LOGS_ENDPOINT``).

    Without ``--otlp`` the OpenTelemetry variables apply as the specification
    says, per signal (``TRACES``, ``METRICS`` or ``LOGS``):
    ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``
    (``http/protobuf`` by default, or ``grpc``); ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``
    is used as given, ``OTEL_EXPORTER_OTLP_ENDPOINT`` gets ``/v1/traces``,
    ``/v1/metrics`` or ``/v1/logs`` appended for HTTP. For gRPC an endpoint without a scheme is
    plaintext when ``OTEL_EXPORTER_OTLP[_<SIGNAL>]_INSECURE=true``, else TLS.
    ``OTEL_TRACES_EXPORTER=none`` (``OTEL_METRICS_EXPORTER``, ``OTEL_LOGS_EXPORTER``)
    turns the signal off whatever else is set.

    Args:
        otlp: the ``--otlp`` value, or ``None``.
        environ: the process environment (or a stand-in).
        signal: ``"traces"``, ``"metrics"`` or ``"logs"``.

    Returns:
        The target, or ``None`` when the signal is not exported.

    Raises:
        ValueError: the URL or protocol cannot be used (the message names the
            setting and what is accepted, so the addon can show it as is).
    """
    upper = signal.upper()
    if (env_value(environ, f"OTEL_{upper}_EXPORTER") or "").lower() == "none":
        return None
    headers = tuple(
        parse_env_headers(
            env_value(environ, f"OTEL_EXPORTER_OTLP_{upper}_HEADERS")
            or env_value(environ, "OTEL_EXPORTER_OTLP_HEADERS")
            or "",
            liberal=True,
        ).items()
    )
    if otlp is not None and otlp.strip():
        return _target_from_url(otlp.strip(), headers, signal)

    protocol = (
        env_value(environ, f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")
        or env_value(environ, "OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; "
            "use 'http/protobuf' or 'grpc'"
        )
    signal_endpoint = env_value(environ, f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
    base_endpoint = env_value(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if signal_endpoint is None and base_endpoint is None:
        return None

    if protocol == "grpc":
        endpoint = signal_endpoint or base_endpoint or ""
        if "://" not in endpoint:
            insecure = (
                env_value(environ, f"OTEL_EXPORTER_OTLP_{upper}_INSECURE")
                or env_value(environ, "OTEL_EXPORTER_OTLP_INSECURE")
                or "false"
            ).lower() == "true"
            endpoint = ("http://" if insecure else "https://") + endpoint
        _require_host(endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT", ("http", "https"))
        return ExportTarget("grpc", endpoint, headers)

    if signal_endpoint is not None:
        endpoint = signal_endpoint
    else:
        endpoint = (base_endpoint or "").rstrip("/") + f"/v1/{signal}"
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


def _target_from_url(
    url: str, headers: tuple[tuple[str, str], ...], signal: Signal
) -> ExportTarget | None:
    _require_host(url, "--otlp", ("http", "https", "grpc", "grpcs"))
    parts = urlsplit(url)
    if parts.scheme in ("grpc", "grpcs"):
        scheme = "http" if parts.scheme == "grpc" else "https"
        return ExportTarget("grpc", urlunsplit((scheme, parts.netloc, "", "", "")), headers)
    if parts.port == _GRPC_PORT:
        return ExportTarget("grpc", urlunsplit((parts.scheme, parts.netloc, "", "", "")), headers)
    if parts.path in ("", "/"):
        return ExportTarget(
            "http/protobuf", urlunsplit(parts._replace(path=f"/v1/{signal}")), headers
        )
    if signal == "traces":
        return ExportTarget("http/protobuf", url, headers)
    if parts.path.endswith("/v1/traces"):
        path = parts.path[: -len("/v1/traces")] + f"/v1/{signal}"
        return ExportTarget("http/protobuf", urlunsplit(parts._replace(path=path)), headers)
    return None


def capture_content_from_env(environ: Mapping[str, str]) -> bool:
    """Read ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.

    ``true`` turns capture on; so do ``span_only`` and ``span_and_event``, the
    values newer GenAI instrumentations accept. Anything else is off.
    """
    value = (env_value(environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") or "").lower()
    return value in ("true", "span_only", "span_and_event")


def exporter_arguments(target: ExportTarget, timeout: float) -> dict[str, Any]:
    """The keyword arguments of the official OTLP exporters (spans, metrics, logs) for ``target``.

    Args:
        target: where the signal goes.
        timeout: seconds one export may take.

    Returns:
        ``endpoint``, ``headers`` (``None`` when there are none) and
        ``timeout``; for gRPC also ``insecure``, true for an ``http://``
        (plaintext) endpoint.
    """
    arguments: dict[str, Any] = {
        "endpoint": target.endpoint,
        "headers": dict(target.headers) or None,
        "timeout": timeout,
    }
    if target.protocol == "grpc":
        arguments["insecure"] = target.endpoint.startswith("http://")
    return arguments
