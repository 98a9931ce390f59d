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
    assert config["tracing"] is False and config["tracer_provider"] is None
    assert not config["metrics"] and not config["logs"]


def test_token_headers_are_always_sanitized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.SANITIZE_ENV, "x-session")
    fields = telemetry._sanitize_fields()
    assert fields[0] == "x-session"
    assert {"authorization", "x-user-jwt", "cookie"} <= set(fields)
