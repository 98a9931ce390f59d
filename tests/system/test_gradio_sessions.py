"""Gradio's own routes act only on the caller's sessions (issue 31, hole 5:
agent/gradio/session_guard.py).

A session hash used to be all `…/gradio_api/cancel` and `…/queue/data` asked for: anyone holding
one could stop another user's turn mid-write or read their stream, and the audit API handed the
raw hash to auditors. Here bob holds alice's session hash and event id while her turn streams:
his cancel, queue read and heartbeat are refused and her turn completes; her own cancel works.
The route table of the mounted apps is pinned, so a route a new Gradio adds is looked at.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import httpx
import pytest
from starlette.routing import Mount

from agentchat.agent.gradio.session_guard import category
from agentchat.agent.main import create_app
from agentchat.agent.settings import AgentSettings
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import history_items, run
from testkit.stack import Stack, stack_on_own_database

LONG = "привет and echo 150 words"  # ~3 s at 20 ms a token


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    with stack_on_own_database(pg_server, migrated_template,
                               tmp_path_factory.mktemp("sessions"),
                               AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.02") as s:
        yield s


def api(stack: Stack) -> str:
    return stack.gradio_url + "gradio_api"


async def while_streaming(stack: Stack, owner: RawChat, attack: object) -> Outcome:
    """alice's long turn, and `attack(out)` once her first event arrived."""
    started = asyncio.Event()
    out_holder: list[Outcome] = []

    def on_event(out: Outcome) -> None:
        out_holder.append(out)
        started.set()

    turn = asyncio.create_task(owner.submit(LONG, on_event=on_event, timeout=60))
    await asyncio.wait_for(started.wait(), 30)
    await attack(out_holder[0])  # type: ignore[operator]
    return await turn


def test_another_users_cancel_and_queue_read_are_refused(stack: Stack) -> None:
    alice, bob = stack.token("alice"), stack.token("bob")
    got: dict[str, httpx.Response] = {}

    async def go() -> Outcome:
        async with httpx.AsyncClient(timeout=30) as http:
            tab = RawChat(stack.agent.url, alice, http)
            fn = await tab.fn_index()

            async def attack(out: Outcome) -> None:
                body = {"session_hash": tab.session, "fn_index": fn, "event_id": out.event_id}
                as_bob = {"Authorization": f"Bearer {bob}"}
                got["cancel"] = await http.post(api(stack) + "/cancel", json=body,
                                                headers=as_bob)
                got["cancel_anon"] = await http.post(api(stack) + "/cancel", json=body)
                got["data"] = await http.get(api(stack) + "/queue/data", headers=as_bob,
                                             params={"session_hash": tab.session})
                got["data_anon"] = await http.get(api(stack) + "/queue/data",
                                                  params={"session_hash": tab.session})
                got["heartbeat"] = await http.get(api(stack) + f"/heartbeat/{tab.session}",
                                                  headers=as_bob)
                got["join"] = await http.post(api(stack) + "/queue/join", headers=as_bob, json={
                    "data": ["привет", None, None, None, None, None, None], "fn_index": fn,
                    "session_hash": tab.session, "event_data": None})

            return await while_streaming(stack, tab, attack)

    out = run(go())
    for name in ("cancel", "data", "heartbeat", "join"):
        assert got[name].status_code == 404, (name, got[name].text)
        assert got[name].json()["code"] == "NOT_FOUND"
    for name in ("cancel_anon", "data_anon"):
        assert got[name].status_code == 401, (name, got[name].text)
    assert "echo" not in got["data"].text and "w1" not in got["data"].text
    # alice's turn was neither stopped nor read: it ends with her whole answer.
    assert out.kind == "final", out.types()
    assert "w149" in out.events[-1]["content"]


def test_the_owners_cancel_still_stops_her_turn(stack: Stack) -> None:
    alice = stack.token("alice")

    async def go() -> tuple[Outcome, RawChat]:
        async with httpx.AsyncClient(timeout=30) as http:
            tab = RawChat(stack.agent.url, alice, http)
            return await while_streaming(stack, tab, tab.cancel), tab

    out, _ = run(go())
    assert not (out.kind == "final" and "w149" in out.events[-1]["content"]), out.types()
    cid = out.conversation_id
    assert cid
    deadline = time.monotonic() + 30
    while not any(m["role"] == "assistant" and m.get("partial")
                  for m in history_items(stack.agent, alice, cid)):
        assert time.monotonic() < deadline, "the stopped turn keeps its partial answer"
        time.sleep(0.2)


# --- every route the mounted apps expose is placed -------------------------------------------

# What the guard does with each route Gradio 6.31 mounts under /gradio_api (both apps). A new
# Gradio that adds or renames one fails here, so it is looked at before it goes out.
EXPECTED = {
    "session": {
        "/stream/{event_id}", "/stream/{event_id}/close",
        "/stream/{session_hash}/{run}/{component_id}/playlist.m3u8",
        "/stream/{session_hash}/{run}/{component_id}/{segment_id}.{ext}",
        "/stream/{session_hash}/{run}/{component_id}/playlist-file", "/reset", "/reset/",
        "/heartbeat/{session_hash}", "/api/{api_name}", "/api/{api_name}/",
        "/run/{api_name}", "/run/{api_name}/", "/call/v2/{api_name}", "/call/v2/{api_name}/",
        "/call/{api_name}", "/call/{api_name}/", "/queue/join", "/cancel",
        "/call/{api_name}/{event_id}", "/call/v2/{api_name}/{event_id}", "/queue/data",
        "/component_server", "/component_server/", "/upload_progress"},
    "closed": {
        "/dev/reload", "/runs", "/runs/", "/run-history/connect", "/run-history/buckets",
        "/run-history/records",
        "/run-history/records/{endpoint}/{record_id}/assets/{asset_id}", "/process_recording",
        "/vibe-edit", "/vibe-edit/", "/undo-vibe-edit", "/undo-vibe-edit/", "/vibe-code",
        "/vibe-code/", "/vibe-starter-queries", "/vibe-starter-queries/"},
}


def mounted_routes(tmp: str) -> set[str]:
    os.environ.setdefault("AGENTCHAT_MODE", "dev")
    app = create_app(AgentSettings(data_dir=tmp, mode="dev"))  # type: ignore[call-arg]

    def walk(routes: list[object], prefix: str = "") -> Iterator[str]:
        for r in routes:
            if isinstance(r, Mount):
                yield from walk(list(r.routes), prefix + r.path)
            elif hasattr(r, "path"):
                yield prefix + str(r.path)
            elif hasattr(r, "original_router"):  # FastAPI's included router
                yield from walk(list(r.original_router.routes),
                                prefix + str(getattr(r.include_context, "prefix", "")))

    return {p for p in walk(list(app.routes)) if p.startswith("/api/agent/gradio/")}


def test_every_gradio_route_is_placed(tmp_path: object) -> None:
    routes = mounted_routes(str(tmp_path))
    apis = {p.split("/gradio_api", 1)[1] for p in routes if "/gradio_api/" in p}
    assert apis, routes
    by_kind: dict[str, set[str]] = {"session": set(), "closed": set(), "free": set()}
    for a in apis:
        by_kind[category("/gradio_api" + a)].add(a)
    assert by_kind["session"] == EXPECTED["session"]
    assert by_kind["closed"] == EXPECTED["closed"]
    # What stays free names no session, event or upload.
    assert not [a for a in by_kind["free"] if "{session" in a or "{event" in a], by_kind["free"]
    roots = {p.removeprefix("/api/agent/gradio").removeprefix("/page") for p in routes}
    assert {r for r in roots if category(r) == "closed" and "/gradio_api" not in r} == {
        "/login", "/login/", "/logout", "/monitoring", "/monitoring/summary",
        "/monitoring/{key}"}


def test_closed_routes_answer_as_unknown(stack: Stack) -> None:
    for path in ("/gradio_api/vibe-code", "/gradio_api/run-history/buckets", "/monitoring",
                 "/gradio_api/dev/reload"):
        resp = httpx.get(stack.gradio_url.rstrip("/") + path, timeout=10,
                         headers={"Authorization": f"Bearer {stack.token('alice')}"})
        assert resp.status_code == 404 and resp.json()["code"] == "NOT_FOUND", path
