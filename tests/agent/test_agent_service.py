"""The agent service from outside: health, keys, model status, the selection debug view,
the production model path through ChatOpenAI, and what a turn leaves in the records after a
cancel or a dropped connection."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from gradio_client import Client
from psycopg.rows import dict_row

from testkit.stack import Stack
from testkit.support import Service, start_openai_stub


def submit(stack: Stack, user: str, *args: Any, url: str | None = None) -> list[dict[str, Any]]:
    token = stack.token(user)
    client = Client(url or stack.gradio_url, headers={"Authorization": f"Bearer {token}"},
                    verbose=False)
    return collect(client, *args)


def collect(client: Client, *args: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ev in client.submit(*args, api_name="/chat"):
        if not out or ev["metadata"]["seq"] > out[-1]["metadata"]["seq"]:
            out.append(ev)
    return out


def rows(stack: Stack, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(stack.database_url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def test_health_keys_and_model_status(stack: Stack) -> None:
    base = stack.agent.url
    assert httpx.get(base + "/livez").json() == {"status": "ok"}
    missing = httpx.get(base + "/api/agent/no-such-thing")
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
    ready = httpx.get(base + "/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    jwks = httpx.get(base + "/api/agent/.well-known/jwks.json").json()
    assert jwks["keys"] and all(k["kty"] == "OKP" and "d" not in k for k in jwks["keys"])
    assert len(jwks["keys"]) == 1 and set(jwks["keys"][0]) == {"kty", "crv", "x", "kid", "alg",
                                                               "use"}
    auth = {"Authorization": f"Bearer {stack.token('alice')}"}
    status = httpx.get(base + "/api/agent/llm-status", headers=auth).json()
    assert status["model"] == "offline" and status["reachable"] is True
    assert "checked_at" in status
    assert submit(stack, "alice", "привет")[-1]["metadata"]["message_id"]
    metrics = httpx.get(base + "/metrics").text
    completed = [line for line in metrics.splitlines()
                 if line.startswith('agentchat_turns_total{error_code="",status="completed"}')]
    assert completed and float(completed[0].split()[-1]) >= 1
    assert 'agentchat_events_total{type="stream_token"}' in metrics


def test_readyz_reports_a_dead_sidecar(stack: Stack) -> None:
    policy = stack.policy
    assert policy is not None
    policy.stop()
    try:
        ready = httpx.get(stack.agent.url + "/readyz", timeout=10)
        assert ready.status_code == 503
        assert any("policy" in p for p in ready.json()["problems"])
    finally:
        stack.start_policy(port=policy.port)


def test_selection_debug_is_admin_only(stack: Stack) -> None:
    url = stack.agent.url + "/api/agent/debug/tool-selection"
    q = {"q": "задеплой этот дашборд в прод", "uicontext": json.dumps(
        {"objectType": "dashboard", "objectId": "42", "envId": "ss-dev", "contextVersion": 1})}
    ok = httpx.get(url, params=q, headers={"Authorization": f"Bearer {stack.token('alice')}"})
    assert ok.status_code == 200, ok.text
    body = ok.json()
    assert "deploy_dashboard" in body["tools"]
    # get_dashboard reads across environments: the prefetch names none.
    assert body["prefetch"] == [{"dashboard_id": 42}]
    assert "search_dashboards" not in body["tools"], "prefetch suppresses search_dashboards"
    bob = httpx.get(url, params=q, headers={"Authorization": f"Bearer {stack.token('bob')}"})
    assert bob.status_code == 403 and bob.json()["code"] == "FORBIDDEN"
    assert httpx.get(url, params=q).status_code == 401


def test_cancel_records_a_partial_answer(stack: Stack) -> None:
    slow = stack.start_agent(AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.1")
    try:
        client = Client(slow.url + "/api/agent/gradio/", verbose=False,
                        headers={"Authorization": f"Bearer {stack.token('alice')}"})
        job = client.submit("привет", api_name="/chat")
        deadline = time.monotonic() + 20
        while not job.outputs() and time.monotonic() < deadline:
            time.sleep(0.05)
        cid = job.outputs()[0]["metadata"]["conversation_id"]
        job.cancel()
        deadline = time.monotonic() + 20
        turn: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            turn = rows(stack, "SELECT status, error_code FROM turns WHERE conversation_id=%s", cid)
            if turn and turn[0]["status"] != "running":
                break
            time.sleep(0.2)
        assert turn == [{"status": "partial", "error_code": "CANCELLED"}]
        msgs = rows(stack, "SELECT role, content, partial FROM messages WHERE conversation_id=%s"
                    " ORDER BY pos", cid)
        assert msgs[0]["role"] == "user"
        assert msgs[-1]["role"] == "assistant" and msgs[-1]["partial"] is True
        assert msgs[-1]["content"] and "обслуживания" not in msgs[-1]["content"], "cut short"
        # The next message from the same tab works.
        nxt = collect(client, "привет", None, cid)
        assert nxt[-1]["metadata"].get("message_id")
    finally:
        slow.stop()


def test_dropped_connection_turn_completes_and_is_recorded(stack: Stack) -> None:
    """A dropped stream is not a cancel: the server finishes the turn and records it."""
    slow = stack.start_agent(AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.05")
    try:
        base = slow.url + "/api/agent/gradio/gradio_api"
        info = httpx.get(base + "/info").json()
        assert "/chat" in info["named_endpoints"]
        config = httpx.get(slow.url + "/api/agent/gradio/config").json()
        fn_index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "chat")
        session = "drop-" + str(time.time_ns())
        headers = {"Authorization": f"Bearer {stack.token('alice')}"}
        join = httpx.post(base + "/queue/join", headers=headers, json={
            "data": ["найди дашборды про энергопотребление", None, None, None, None, None, None],
            "fn_index": fn_index, "session_hash": session, "event_data": None})
        assert join.status_code == 200, join.text
        cid = None
        with httpx.stream("GET", base + "/queue/data", params={"session_hash": session},
                          headers=headers, timeout=30) as resp:
            for line in resp.iter_lines():
                if line.startswith("data:") and '"process_generating"' in line:
                    msg = json.loads(line[5:])
                    cid = msg["output"]["data"][0]["metadata"]["conversation_id"]
                    break  # drop the connection after the first event
        assert cid
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            got = rows(stack, "SELECT status FROM turns WHERE conversation_id=%s", cid)
            status = got[0]["status"] if got else None
            if status not in (None, "running"):
                break
            time.sleep(0.2)
        assert status == "completed"
        calls = rows(stack, "SELECT tool, outcome FROM tool_calls WHERE conversation_id=%s", cid)
        assert calls == [{"tool": "search_dashboards", "outcome": "ok"}]
        final = rows(stack, "SELECT content, partial FROM messages WHERE conversation_id=%s"
                     " AND role='assistant'", cid)
        assert final and final[-1]["partial"] is False and "энергопотреблению" in final[-1][
            "content"]
    finally:
        slow.stop()


@pytest.fixture(scope="module")
def openai_stub() -> Iterator[Service]:
    svc = start_openai_stub()
    yield svc
    svc.stop()


def test_production_model_path_through_chat_openai(stack: Stack, openai_stub: Service) -> None:
    """Whole turns with streamed tool calls through ChatOpenAI and a real HTTP endpoint."""
    agent = stack.start_agent(AGENTCHAT_AGENT_LLM="openai:stub-model",
                              AGENTCHAT_AGENT_LLM_BASE_URL=openai_stub.url + "/v1",
                              AGENTCHAT_AGENT_LLM_API_KEY="sk-local",
                              AGENTCHAT_AGENT_LLM_TIMEOUT_S="5")
    gradio = agent.url + "/api/agent/gradio/"
    try:
        status = httpx.get(agent.url + "/api/agent/llm-status", headers={
            "Authorization": f"Bearer {stack.token('alice')}"}).json()
        assert status["reachable"] is True and status["model"] == "openai:stub-model"
        events = submit(stack, "alice", "найди дашборды про энергопотребление", url=gradio)
        kinds = [e["metadata"].get("type") for e in events]
        assert "stream_token" in kinds and "tool_start" in kinds and "tool_end" in kinds
        assert "энергопотреблению" in events[-1]["content"]
        assert events[-1]["metadata"]["message_id"]
        # A card through the production path too.
        card_events = submit(stack, "alice", "задеплой дашборд 42 в прод", url=gradio)
        card = card_events[-1]["metadata"]
        assert card.get("type") == "confirm_required", card_events
        # LLM failures: refused, cut halfway, hanging: LLM_UNAVAILABLE, retryable.
        for mode in ("refuse", "cut", "hang"):
            httpx.post(openai_stub.url + "/mode", json={"mode": mode})
            started = time.monotonic()
            last = submit(stack, "alice", "привет", url=gradio)[-1]["metadata"]
            assert last["type"] == "error", mode
            assert last["code"] == "LLM_UNAVAILABLE" and last["retryable"] is True, mode
            assert time.monotonic() - started < 30, f"{mode}: does not hang"
    finally:
        httpx.post(openai_stub.url + "/mode", json={"mode": "ok"})
        agent.stop()


def test_service_token_from_a_file_is_reread_when_it_changes(stack: Stack, tmp_path) -> None:
    """The operator's Secret, mounted as a folder: a new token file takes effect live."""
    from agentchat.keys import load_ring, sign_service_token

    settings = stack.settings()
    token_dir = tmp_path / "service-token"
    token_dir.mkdir()
    token_file = token_dir / "token"

    def mint() -> str:
        return sign_service_token(load_ring(settings.keys_dir), issuer=settings.service_issuer,
                                  audience=settings.service_audience, subject="agentchat-agent")

    token_file.write_text(mint())
    agent = stack.start_agent(AGENTCHAT_AGENT_SERVICE_TOKEN_FILE=str(token_file),
                              AGENTCHAT_AGENT_SERVICE_TOKEN_URL="")
    url = agent.url + "/api/agent/gradio/"
    try:
        ok = submit(stack, "alice", "найди дашборды про энергопотребление", url=url)
        assert any(e["metadata"].get("type") == "tool_end" for e in ok)
        token_file.write_text("not-a-token")  # a broken Secret: no call may run
        bad = submit(stack, "alice", "найди дашборды про продажи", url=url)
        assert bad[-1]["metadata"]["code"] == "POLICY_UNAVAILABLE"
        assert not any(e["metadata"].get("type") == "tool_start" for e in bad)
        # Kubelet swaps the folder's content; the agent picks the new token up, no restart.
        (token_dir / "token.new").write_text(mint())
        (token_dir / "token.new").rename(token_file)
        again = submit(stack, "alice", "найди дашборды про энергопотребление", url=url)
        assert any(e["metadata"].get("type") == "tool_end" for e in again), again
    finally:
        agent.stop()
