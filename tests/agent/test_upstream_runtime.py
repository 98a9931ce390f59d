"""An upstream MCP tool's call through the gate's runtime (ToolRuntime → UpstreamCalls)
against a real MCP server process, each case as its events and what the server received:

- the pins asked right before sending: a drifted tool is refused, nothing sent;
- exactly the validated arguments are sent, less the environment argument;
- a read is sent again once after a connection failure; a write never is;
- a write that times out has an unknown outcome and was sent once;
- the server's error, a non-text block, an environment without a URL, no upstream wired.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentchat.agent.gate.tool_runtime import ToolOutcome, ToolRuntime
from agentchat.agent.gate.upstream_auth import UpstreamCredentials
from agentchat.agent.gate.upstream_calls import UpstreamCalls
from agentchat.agent.gate.upstream_client import UpstreamClients
from agentchat.catalog import Catalog, Tool, load_catalog
from testkit.support import free_port
from testkit.upstream_catalog import catalog_with_upstreams, superset_entries, upstream
from testkit.upstream_server import UpstreamServer, start_upstream

TIMEOUT_S = 1.5
INFO = "superset__get_dashboard_info"
RENAME = "superset__update_dashboard"


class Pins:
    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.asked: list[str] = []

    async def allows(self, tool: Tool) -> bool:
        self.asked.append(tool.name)
        return tool.name not in self.refused


@pytest.fixture(scope="module")
def superset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamServer]:
    server = start_upstream(handshake_only=True,
                            log=tmp_path_factory.mktemp("up") / "superset.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory, superset: UpstreamServer) -> Catalog:
    defs = {d["name"]: d for d in superset.definitions()}
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    urls = {"ss-dev": superset.url, "ss-stage": dead}  # prod: no URL
    path = catalog_with_upstreams(tmp_path_factory.mktemp("cat"),
                                  {"superset": upstream(urls, timeout_s=TIMEOUT_S)},
                                  superset_entries("superset", defs))
    return load_catalog(path)


@pytest.fixture
async def runtime(superset: UpstreamServer) -> AsyncIterator[tuple[ToolRuntime, Pins]]:
    superset.reset()
    pins = Pins()
    async with httpx.AsyncClient() as http:
        clients = UpstreamClients(UpstreamCredentials(folder=Path("/nonexistent"), http=http,
                                                      dev=True), max_result_bytes=64 * 1024)
        calls = UpstreamCalls(clients, pins=pins, max_result_bytes=64 * 1024,
                              max_output_chars=4000, backoff_s=0.1)
        yield ToolRuntime(base_url="http://unused", tokens=None, http=http,  # type: ignore[arg-type]
                          upstream=calls), pins
        await clients.aclose()


async def run(rt: ToolRuntime, catalog: Catalog, tool: str, args: dict[str, Any]
              ) -> tuple[ToolOutcome, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    outcome = await rt.run(catalog=catalog, tool_name=tool, call_id="c1", args=args,
                           user_jwt="x.e30.x", idempotency_key=None, emit=events.append,
                           lang="en")
    return outcome, events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


async def test_a_read_sends_exactly_its_arguments_less_the_environment(
        runtime: tuple[ToolRuntime, Pins], catalog: Catalog, superset: UpstreamServer) -> None:
    rt, pins = runtime
    outcome, events = await run(rt, catalog, INFO, {"env_id": "ss-dev", "dashboard_id": 2})
    assert kinds(events) == ["tool_start", "tool_end"], events
    assert outcome.status == "ok" and outcome.output["dashboard_title"] == "Energy usage"
    assert outcome.upstream == {"server": "superset", "tool": "get_dashboard_info",
                                "user": None}
    [call] = superset.calls()
    assert (call["tool"], call["arguments"]) == ("get_dashboard_info", {"dashboard_id": 2})
    assert pins.asked == [INFO]


async def test_a_drifted_tool_is_refused_before_anything_is_sent(
        runtime: tuple[ToolRuntime, Pins], catalog: Catalog, superset: UpstreamServer) -> None:
    rt, pins = runtime
    pins.refused.add(INFO)
    outcome, events = await run(rt, catalog, INFO, {"env_id": "ss-dev", "dashboard_id": 2})
    assert kinds(events) == ["tool_start", "tool_error"]
    assert events[-1]["reason"] == "tool_definition_changed" and outcome.status == "refused"
    assert superset.journal()["requests"] == []


async def test_a_read_is_sent_again_once_a_write_never(
        runtime: tuple[ToolRuntime, Pins], catalog: Catalog, superset: UpstreamServer) -> None:
    rt, _ = runtime
    await run(rt, catalog, INFO, {"env_id": "ss-dev", "dashboard_id": 1})  # its era learnt
    superset.reset()
    superset.fail_http(503, count=1)
    outcome, events = await run(rt, catalog, INFO, {"env_id": "ss-dev", "dashboard_id": 1})
    assert kinds(events) == ["tool_start", "tool_retry", "tool_end"], events
    assert outcome.attempts == 2 and len(superset.calls()) == 1
    superset.reset()
    superset.fail_http(503, count=5)
    outcome, events = await run(rt, catalog, RENAME, {"env_id": "ss-dev", "dashboard_id": 1,
                                                      "dashboard_title": "New"})
    assert kinds(events) == ["tool_start", "tool_error"], events
    assert events[-1]["reason"] == "upstream_unavailable" and events[-1]["retryable"] is True
    assert len([r for r in superset.journal()["requests"] if r.get("status") == 503]) == 1
    assert superset.calls() == []
    # An environment whose URL refuses connections: unavailable, nothing hangs.
    outcome, events = await run(rt, catalog, INFO, {"env_id": "ss-stage", "dashboard_id": 1})
    assert events[-1]["reason"] == "upstream_unavailable" and outcome.attempts == 2


async def test_a_write_that_times_out_is_unknown_and_was_sent_once(
        runtime: tuple[ToolRuntime, Pins], catalog: Catalog, superset: UpstreamServer) -> None:
    rt, _ = runtime
    superset.behave("update_dashboard", hang_s=30)
    started = time.monotonic()
    outcome, events = await run(rt, catalog, RENAME, {"env_id": "ss-dev", "dashboard_id": 1,
                                                      "dashboard_title": "New"})
    assert time.monotonic() - started < TIMEOUT_S + 2
    assert kinds(events) == ["tool_start", "tool_timeout"], events
    assert events[-1]["outcome"] == "unknown" and events[-1]["retryable"] is False
    assert outcome.status == "unknown" and "may have run" in (outcome.error or "")
    assert len(superset.calls("update_dashboard")) == 1


@pytest.mark.parametrize(("result", "reason", "output"), [
    ({"content": [{"type": "text", "text": "no such dashboard"}], "isError": True},
     "upstream_error", None),
    ({"content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}, None,
     {"content": [{"type": "image", "mimeType": "image/png", "bytes": 8}]}),
    ({"content": [], "structuredContent": {"items": ["x" * 1000] * 100}}, "result_too_large",
     None),
])
async def test_what_comes_back(runtime: tuple[ToolRuntime, Pins], catalog: Catalog,
                               superset: UpstreamServer, result: dict[str, Any],
                               reason: str | None, output: Any) -> None:
    rt, _ = runtime
    superset.behave("get_dashboard_info", result=result)
    outcome, events = await run(rt, catalog, INFO, {"env_id": "ss-dev", "dashboard_id": 1})
    if reason is None:
        assert events[-1]["type"] == "tool_end" and outcome.output == output
    else:
        assert events[-1]["type"] == "tool_error" and events[-1]["reason"] == reason
        assert outcome.status == "error" and outcome.attempts == 1


async def test_no_url_for_the_environment_or_no_upstream_wired_sends_nothing(
        runtime: tuple[ToolRuntime, Pins], catalog: Catalog, superset: UpstreamServer) -> None:
    rt, _ = runtime
    _, events = await run(rt, catalog, INFO, {"env_id": "prod", "dashboard_id": 1})
    assert events[-1]["reason"] == "upstream_not_configured"
    bare = ToolRuntime(base_url="http://unused", tokens=None, http=rt.http)  # type: ignore[arg-type]
    _, events = await run(bare, catalog, INFO, {"env_id": "ss-dev", "dashboard_id": 1})
    assert events[-1]["reason"] == "upstream_not_configured"
    assert superset.journal()["requests"] == []
