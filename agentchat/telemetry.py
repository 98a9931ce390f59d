"""OpenTelemetry for every component: one setup, off by default, set only by `OTEL_*`.

    setup_telemetry("agentchat-agent")   # at the entry point, before the app is built
    FastAPI(..., telemetry=fastapi_telemetry())   # each app: FastAPI's own server spans

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`) or an OTLP
endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and
`OTEL_SDK_DISABLED` is not true. `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS` (`fastapi`, `httpx`,
`psycopg`, comma-separated) leaves those layers out, as OpenTelemetry's auto-instrumentation
reads it: bench/observe_cost.py measures what each costs. The exporter is OTLP over
HTTP/protobuf; the SDK reads the rest
itself (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`,
`OTEL_EXPORTER_OTLP_*` headers and timeouts). Off, nothing is instrumented: the API's no-op
tracer is all the code meets.

Server spans are FastAPI's own OpenTelemetry support (FastAPI >= 0.162, `FastAPI(telemetry=)`):
one span per request, continuing the caller's W3C `traceparent`, with no spans per ASGI message
and no header capture. It costs the sidecar about half of what opentelemetry-instrumentation-
fastapi's ASGI middleware did per request (bench/HISTORY.md, "The cost of tracing"). Its
operation spans (dependencies, endpoint, serialization), its HTTP metrics and its logs stay
off: Prometheus has the metrics, and the turn's own spans say more than FastAPI's operations.

What spans may hold: the instrumentation libraries record methods, routes, URLs, status codes
and SQL statements (psycopg: the statement text with its placeholders, never the parameters;
`capture_parameters` stays off). Headers are recorded only on outgoing calls (httpx) and only
when a deployer asks for them (`OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_*`), and the
headers that carry tokens are always in the sanitize list, so their values become
`[REDACTED]`. Bodies are never recorded.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import MutableMapping, Sequence
from typing import Any

from fastapi.telemetry import TelemetryConfig
from opentelemetry import trace
from opentelemetry.context import Context, attach
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.util.types import Attributes

from agentchat.errors import LocalError

log = logging.getLogger("agentchat.telemetry")

EXPORTERS = ("otlp", "console", "none")
# Health and scrape routes are polled every few seconds: spans of them are noise.
EXCLUDED_ROUTES = frozenset({"livez", "readyz", "healthz", "metrics"})
# Headers whose values are credentials; OTel's sanitize list takes regexes, case-insensitive.
SECRET_HEADERS = ("authorization", "x-user-jwt", "cookie", "set-cookie", "proxy-authorization",
                  "x-api-key", ".*token.*", ".*secret.*")
SANITIZE_ENV = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS"

_state: dict[str, Any] = {"provider": None}


class TelemetryConfigError(LocalError, ValueError):
    """An `OTEL_*` setting this build cannot honour (refused at start, not ignored)."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() == "true"


def exporter_name() -> str:
    """The traces exporter the environment asks for: `none` unless tracing is configured."""
    if _flag("OTEL_SDK_DISABLED"):
        return "none"
    named = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        if named not in EXPORTERS:
            raise TelemetryConfigError(
                f"OTEL_TRACES_EXPORTER={named!r}: this build exports otlp (HTTP) or console")
        return named
    endpoint = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    return "otlp" if endpoint else "none"


def disabled_instrumentations() -> set[str]:
    raw = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return {name.strip().lower() for name in raw.split(",") if name.strip()}


def enabled() -> bool:
    return _state["provider"] is not None


def setup_telemetry(service_name: str) -> bool:
    """Install the SDK's tracer provider and the httpx and psycopg instrumentations once,
    when the environment turns tracing on. Returns whether tracing is on."""
    if _state["provider"] is not None:
        return True
    name = exporter_name()
    if name == "none":
        return False
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if name == "otlp" and protocol != "http/protobuf":
        raise TelemetryConfigError(
            f"OTLP protocol {protocol!r}: this build ships the HTTP/protobuf exporter only")

    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    _sanitize_secret_headers()
    resource = Resource.create()
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    # The sampler OTEL_TRACES_SAMPLER names (the SDK reads it; a throwaway provider shows
    # which), wrapped so SQL and HTTP calls outside any trace are not traced (below).
    chosen = TracerProvider(shutdown_on_exit=False).sampler
    provider = TracerProvider(resource=resource, sampler=_ClientsInTraces(chosen))
    exporter: SpanExporter
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*
    else:
        exporter = ConsoleSpanExporter()
    # Batched off the request path; OTEL_BSP_* tune it. Flushed at exit by the provider.
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    off = disabled_instrumentations()
    if "httpx" not in off:
        HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    if "psycopg" not in off:
        # Statements only: parameters hold message text and argument values.
        PsycopgInstrumentor().instrument(tracer_provider=provider, capture_parameters=False,
                                         enable_commenter=False)
    _state["provider"] = provider
    log.info("tracing on: %s exporter, service %s", name,
             resource.attributes.get(SERVICE_NAME))
    return True


class _ClientsInTraces(Sampler):
    """A client span (a SQL statement, an outgoing HTTP call) with no parent is dropped:
    background work (heartbeats, the run writer, the sweeper, migrations at start) would
    otherwise make a one-span trace per statement, about half of all spans, and none of them
    answers "what happened in this turn". Everything else is the chosen sampler's call."""

    def __init__(self, base: Sampler) -> None:
        self._base = base

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str,
                      kind: trace.SpanKind | None = None, attributes: Attributes = None,
                      links: Sequence[trace.Link] | None = None,
                      trace_state: trace.TraceState | None = None) -> SamplingResult:
        if kind == trace.SpanKind.CLIENT and not trace.get_current_span(
                parent_context).get_span_context().is_valid:
            return SamplingResult(Decision.DROP)
        return self._base.should_sample(parent_context, trace_id, name, kind, attributes,
                                        links, trace_state)

    def get_description(self) -> str:
        return f"ClientsInTraces{{{self._base.get_description()}}}"


def fastapi_telemetry() -> TelemetryConfig:
    """`FastAPI(telemetry=...)` for every app: a server span per request while tracing is on,
    nothing otherwise. Build the app after setup_telemetry(). A mounted FastAPI app (Gradio's)
    sees the outer app's request telemetry in the scope and adds none of its own; so that it
    also adds none when `fastapi` is in OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, that case keeps
    FastAPI's telemetry on and excludes every request (an excluded request is marked too)."""
    provider = _state["provider"]
    if provider is None:
        return {"tracing": False, "metrics": False, "logs": False, "operation_spans": False,
                "auto_configure": False}
    off = "fastapi" in disabled_instrumentations()
    return {"tracing": True, "tracer_provider": provider, "metrics": False, "logs": False,
            "operation_spans": False, "auto_configure": False,
            "exclude": _every_request if off else _excluded}


def _every_request(scope: MutableMapping[str, Any]) -> bool:
    return True


def _excluded(scope: MutableMapping[str, Any]) -> bool:
    return str(scope.get("path", "")).rstrip("/").rsplit("/", 1)[-1] in EXCLUDED_ROUTES


def detached() -> contextvars.Context:
    """The current context without its span, for a task that outlives the request that
    started it (a turn after its `queue/join` answered): that task is a trace of its own."""
    ctx = contextvars.copy_context()
    ctx.run(attach, Context())
    return ctx


def shutdown() -> None:
    """Flush and stop the exporter (the provider also does this at interpreter exit)."""
    provider = _state["provider"]
    if provider is not None:
        provider.shutdown()


def _sanitize_fields() -> list[str]:
    given = [f.strip() for f in os.environ.get(SANITIZE_ENV, "").split(",") if f.strip()]
    return given + [h for h in SECRET_HEADERS if h not in given]


def _sanitize_secret_headers() -> None:
    # The httpx instrumentation reads the sanitize list from the environment only; a deployer
    # who captures headers (OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_*) still never exports a
    # token, whatever list they gave.
    os.environ[SANITIZE_ENV] = ",".join(_sanitize_fields())
