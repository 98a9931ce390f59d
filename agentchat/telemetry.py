"""OpenTelemetry for every component: one setup, off by default, set only by `OTEL_*`.

    setup_telemetry("agentchat-agent")   # at the entry point, before the app is built
    instrument_app(app)                  # each FastAPI app (a no-op while tracing is off)

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`) or an OTLP
endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and
`OTEL_SDK_DISABLED` is not true. The exporter is OTLP over HTTP/protobuf; the SDK reads the rest
itself (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`,
`OTEL_EXPORTER_OTLP_*` headers and timeouts). Off, nothing is instrumented: the API's no-op
tracer is all the code meets.

What spans may hold: the instrumentation libraries record methods, routes, URLs, status codes
and SQL statements (psycopg: the statement text with its placeholders, never the parameters;
`capture_parameters` stays off). Headers are recorded only when a deployer asks for them
(`OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_*`), and the headers that carry tokens are always
in the sanitize list, so their values become `[REDACTED]`. Bodies are never recorded.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("agentchat.telemetry")

EXPORTERS = ("otlp", "console", "none")
# Health and scrape routes are polled every few seconds: spans of them are noise.
EXCLUDED_URLS = "/livez,/readyz,/healthz,/metrics"
# Headers whose values are credentials; OTel's sanitize list takes regexes, case-insensitive.
SECRET_HEADERS = ("authorization", "x-user-jwt", "cookie", "set-cookie", "proxy-authorization",
                  "x-api-key", ".*token.*", ".*secret.*")
SANITIZE_ENV = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS"

_state: dict[str, Any] = {"provider": None}


class TelemetryConfigError(ValueError):
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

    from opentelemetry import trace
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
    provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER
    exporter: SpanExporter
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*
    else:
        exporter = ConsoleSpanExporter()
    # Batched off the request path; OTEL_BSP_* tune it. Flushed at exit by the provider.
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    # Statements only: parameters hold message text and argument values.
    PsycopgInstrumentor().instrument(tracer_provider=provider, capture_parameters=False,
                                     enable_commenter=False)
    _state["provider"] = provider
    log.info("tracing on: %s exporter, service %s", name,
             resource.attributes.get(SERVICE_NAME))
    return True


def instrument_app(app: Any) -> None:
    """Server spans for a FastAPI app, continuing the caller's W3C `traceparent`."""
    if _state["provider"] is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # No spans per ASGI receive/send message: a stream would make one per event.
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=_state["provider"], excluded_urls=EXCLUDED_URLS,
        http_capture_headers_sanitize_fields=_sanitize_fields(),
        exclude_spans=["receive", "send"])


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
