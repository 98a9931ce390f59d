"""agentchat/telemetry.py reads only the standard OTEL_* variables: off by default, on with an
exporter or an endpoint, off again with OTEL_SDK_DISABLED, and a setting it cannot honour is
refused rather than ignored. (The traces themselves: test_traces.py, real processes.)"""

from __future__ import annotations

import pytest

from agentchat import telemetry

VARS = ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("env", "expected"), [
    ({}, "none"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "none"),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, "none"),
    ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "none"),
])
def test_exporter_from_the_standard_variables(monkeypatch: pytest.MonkeyPatch,
                                              env: dict[str, str], expected: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert telemetry.exporter_name() == expected


def test_an_exporter_this_build_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(telemetry.TelemetryConfigError, match="zipkin"):
        telemetry.exporter_name()


def test_grpc_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(telemetry.TelemetryConfigError, match="HTTP/protobuf"):
        telemetry.setup_telemetry("agentchat-test")
    assert not telemetry.enabled()


def test_off_by_default_sets_nothing_up() -> None:
    assert telemetry.setup_telemetry("agentchat-test") is False
    assert not telemetry.enabled()
    config = telemetry.fastapi_telemetry()  # FastAPI's own spans stay off with it
    assert config["tracing"] is False and config.get("tracer_provider") is None
    assert not config["metrics"] and not config["logs"]


def test_token_headers_are_always_sanitized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.SANITIZE_ENV, "x-session")
    fields = telemetry._sanitize_fields()
    assert fields[0] == "x-session"
    assert {"authorization", "x-user-jwt", "cookie"} <= set(fields)


@pytest.mark.parametrize("disabled", [False, True])
def test_fastapis_spans_one_per_request_none_from_a_mounted_app(
        monkeypatch: pytest.MonkeyPatch, disabled: bool) -> None:
    """The outer app's server span only (a mounted FastAPI app, as Gradio's, adds none, even
    one whose own settings would trace), none for health routes, and none at all when
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names fastapi."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setitem(telemetry._state, "provider", provider)  # as setup_telemetry() leaves it
    if disabled:
        monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "httpx,fastapi")
    outer = FastAPI(telemetry=telemetry.fastapi_telemetry())
    inner = FastAPI(telemetry={"tracer_provider": provider})  # would trace on its own

    @inner.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    @outer.get("/livez")
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    outer.mount("/sub", inner)
    with TestClient(outer) as client:
        assert client.get("/sub/hello").status_code == 200
        assert client.get("/livez").status_code == 200
    names = [s.name for s in exported.get_finished_spans()]
    assert names == ([] if disabled else ["GET /sub/hello"]), names
