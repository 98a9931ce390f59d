"""Traces across agent and sidecar (issue 20 item 2): both export to a local OTLP/HTTP receiver.

One turn with a tool call (the prefetch of dashboard 42) and a card (its deploy to prod) is
one trace: the turn's root span, the graph's and the tools' spans, the httpx client spans, and
the sidecar's server spans continuing the agent's `traceparent`, each carrying its decision.
Both processes capture every request header (`.*`; only outgoing calls record headers), so the
test also proves that the token headers are sanitized, and no span attribute anywhere holds a
token or the message text.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.otlp import OtlpReceiver
from testkit.raw_chat import RawChat
from testkit.stack import Stack, stack_on_own_database

MESSAGE = "задеплой дашборд 42 в прод"
JWT = re.compile(r"eyJ[\w-]+\.[\w-]+\.[\w-]+")
CAPTURE_ALL = {"OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST": ".*",
               "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": ".*"}
SERVER, CLIENT = 2, 3


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as rx:
        yield rx


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, pg_server: str, migrated_template: str,
           receiver: OtlpReceiver) -> Iterator[Stack]:
    with stack_on_own_database(
            pg_server, migrated_template, tmp_path_factory.mktemp("traced"),
            policy_env={**receiver.env("agentchat-policy"), **CAPTURE_ALL},
            **receiver.env("agentchat-agent"), **CAPTURE_ALL) as s:
        yield s


@pytest.fixture(scope="module")
def turn_trace(traced: Stack, receiver: OtlpReceiver) -> list[dict[str, Any]]:
    async def go() -> Any:
        async with httpx.AsyncClient() as http:
            return await RawChat(traced.agent.url, traced.token("alice"), http).submit(MESSAGE)

    out = asyncio.run(go())
    assert out.kind == "confirm_required", out.types()
    assert "tool_end" in out.types(), out.types()

    def trace_of_turn(spans: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        roots = [s for s in spans if s["name"] == "agentchat.turn"]
        if not roots:
            return None
        trace = [s for s in spans if s["trace_id"] == roots[-1]["trace_id"]]
        # Both processes flush every 200 ms: wait until the sidecar's decisions are in.
        decided = [s for s in trace if "agentchat.decision_id" in s["attributes"]
                   and s["service"] == "agentchat-policy"]
        return trace if len(decided) >= 2 else None

    trace = receiver.wait_for(trace_of_turn, timeout=20)
    assert trace, f"no complete turn trace among {len(receiver.snapshot())} spans"
    return list(trace)


def test_one_turn_is_one_trace_across_agent_and_sidecar(turn_trace: list[dict[str, Any]]
                                                        ) -> None:
    by_id = {s["span_id"]: s for s in turn_trace}
    services = {s["service"] for s in turn_trace}
    assert services == {"agentchat-agent", "agentchat-policy"}, services
    roots = [s for s in turn_trace if s["parent_id"] is None]
    assert [r["name"] for r in roots] == ["agentchat.turn"], [r["name"] for r in roots]
    # Every span's parent is in the same trace: nothing dangles.
    assert all(s["parent_id"] in by_id for s in turn_trace if s["parent_id"])

    checks = [s for s in turn_trace if s["service"] == "agentchat-policy"
              and s["kind"] == SERVER and s["attributes"].get("http.route") == "/v1/check"]
    assert len(checks) >= 2, [s["name"] for s in turn_trace if s["service"] != "agentchat-agent"]
    for server in checks:
        parent = by_id[server["parent_id"]]
        # The sidecar continued the agent's check, the request's client span (W3C
        # traceparent; agent/gate/policy_wire.py sends it, not httpx).
        assert parent["service"] == "agentchat-agent" and parent["kind"] == CLIENT, parent
        assert parent["name"] == "agentchat.policy.check"
        assert str(parent["attributes"].get("http.url", "")).endswith("/v1/check")

    # Each check's server span carries its decision (FastAPI's span: one per decision).
    decisions = {s["attributes"]["agentchat.tool"]: s for s in checks}
    deploy = decisions["deploy_dashboard"]
    assert deploy["scope"] == "fastapi", deploy["scope"]
    assert deploy["attributes"]["agentchat.decision"] == "allow_with_confirmation"
    assert deploy["attributes"]["agentchat.environment"] == "prod"
    assert re.fullmatch(r"[0-9a-f]{32}", deploy["attributes"]["agentchat.decision_id"])
    assert deploy["attributes"]["agentchat.policy_revision"]
    assert decisions["get_dashboard"]["attributes"]["agentchat.decision"] == "allow"

    # The tool call to ss-tools (the sandbox) is a client span of the same trace, and the
    # card (H-audit's span) sits in it too.
    urls = [str(s["attributes"].get("http.url")) for s in turn_trace if s["kind"] == CLIENT]
    assert any(u.endswith("/api/dashboards/42") for u in urls), urls
    names = {s["name"] for s in turn_trace}
    assert {"agentchat.card", "agentchat.tool"} <= names, sorted(names)
    # The database work of the turn is traced too (psycopg: statements).
    assert any(s["scope"] == "opentelemetry.instrumentation.psycopg" for s in turn_trace)


def test_ss_tools_gets_the_turns_traceparent(turn_trace: list[dict[str, Any]],
                                             traced: Stack) -> None:
    # The sandbox keeps the trace id of the `traceparent` each call carried (docs §7): the
    # turn's prefetch of dashboard 42 reached ss-tools inside the turn's trace.
    turn = next(s for s in turn_trace if s["name"] == "agentchat.turn")
    records = traced.audit(operation="get_dashboard")
    assert records and records[-1]["trace_id"] == turn["trace_id"], records[-1:]


def test_a_batch_gives_one_decision_event_per_check(traced: Stack,
                                                   receiver: OtlpReceiver) -> None:
    trace_id = f"{0xA9E17C4A7:032x}"  # a sampled parent the test made up, as the agent sends
    checks = [{"request_id": f"batch-{i}", "environment": "ss-dev", "tool": tool,
               "arguments": args} for i, (tool, args) in enumerate((
                   ("search_dashboards", {"query": "sales", "env_id": "ss-dev"}),
                   ("refresh_dataset", {"dataset_id": 7, "env_id": "ss-dev"})))]
    assert traced.policy is not None
    resp = httpx.post(traced.policy.url + "/v1/checks", json={"checks": checks}, headers={
        "Authorization": f"Bearer {traced.service_token()}",
        "X-User-JWT": traced.token("alice"),
        "traceparent": f"00-{trace_id}-{0xB47C4:016x}-01"}, timeout=10)
    assert resp.status_code == 200, resp.text
    answered = {r["decision_id"] for r in resp.json()["results"]}

    def server_span(spans: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((s for s in spans if s["trace_id"] == trace_id and s["kind"] == SERVER),
                    None)

    span = receiver.wait_for(server_span, timeout=20)
    assert span is not None and span["attributes"].get("http.route") == "/v1/checks", span
    events = [e for e in span["events"] if e["name"] == "agentchat.policy.decision"]
    assert [e["attributes"]["agentchat.tool"] for e in events] == [
        "search_dashboards", "refresh_dataset"]
    assert {e["attributes"]["agentchat.decision_id"] for e in events} == answered


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    else:
        yield str(value)


def test_no_span_holds_a_token_or_the_message(turn_trace: list[dict[str, Any]],
                                              receiver: OtlpReceiver, traced: Stack) -> None:
    spans = receiver.snapshot()
    assert len(spans) >= len(turn_trace)
    token = traced.token("alice")
    for span in spans:
        for key, value in span["attributes"].items():
            for text in _strings(value):
                assert not JWT.search(text), (span["name"], key)
                assert token not in text and MESSAGE not in text, (span["name"], key)
                assert "42 в прод" not in text, (span["name"], key)
        # SQL parameters are never recorded, only statements.
        assert not any(k.startswith("db.statement.parameters") or k == "db.query.parameter"
                       for k in span["attributes"]), span["name"]
        for event in span["events"]:
            assert not any(JWT.search(t) for t in _strings(event["attributes"]))
    # Background SQL and HTTP (heartbeats, the run writer, migrations) make no traces of
    # their own: a client span is traced inside a turn or a request only.
    orphans = [(s["service"], s["name"]) for s in spans
               if s["parent_id"] is None and s["kind"] == CLIENT]
    assert not orphans, orphans[:5]
    # The headers that carry tokens were captured (`.*`), and sanitized.
    captured = [s["attributes"][k] for s in turn_trace for k in s["attributes"]
                if k in ("http.request.header.authorization", "http.request.header.x_user_jwt")]
    assert captured and all(v == ["[REDACTED]"] for v in captured), captured
