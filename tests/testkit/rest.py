"""Helpers for the Conversations REST API tests: HTTP calls and /chat through gradio_client."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from gradio_client import Client

from testkit.stack import Stack


def fresh_user(stack: Stack, roles: list[str] | None = None) -> str:
    """A token for a user nobody else uses, so a test sees only its own conversations."""
    return stack.token(f"rest-{uuid.uuid4().hex[:10]}", roles or ["admin"])


def api(stack: Stack, method: str, path: str, token: str | None = None,
        **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, stack.agent.url + path, headers=headers, timeout=30, **kw)


def ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, (resp.status_code, resp.text)
    return resp.json()


def create(stack: Stack, token: str, title: str | None = None) -> dict[str, Any]:
    body = {"title": title} if title is not None else None
    return dict(ok(api(stack, "POST", "/api/assistant/conversations", token, json=body), 201))


def append(stack: Stack, token: str, cid: str, content: str, role: str = "user",
           message_id: str | None = None) -> httpx.Response:
    return api(stack, "POST", f"/api/assistant/conversations/{cid}/messages", token,
               json={"id": message_id or str(uuid.uuid4()), "role": role, "content": content})


def listing(stack: Stack, token: str, **params: Any) -> dict[str, Any]:
    return dict(ok(api(stack, "GET", "/api/assistant/conversations", token, params=params)))


def history(stack: Stack, token: str, cid: str, **params: Any) -> dict[str, Any]:
    return dict(ok(api(stack, "GET", "/api/assistant/history", token,
                       params={"conversation_id": cid, **params})))


def session(stack: Stack, token: str) -> Client:
    """A Gradio session, like one browser tab (the multi-tab lease is per session)."""
    return Client(stack.gradio_url, headers={"Authorization": f"Bearer {token}"},
                  verbose=False)


def chat(client: Client, text: Any, action: str | None = None,
         conversation_id: str | None = None) -> list[dict[str, Any]]:
    """One /chat submit as the frontend makes it; its events, repeats (same seq) dropped."""
    job = client.submit(text, action, conversation_id, api_name="/chat")
    job.result(timeout=120)
    events: list[dict[str, Any]] = []
    for out in job.outputs():
        if not events or out["metadata"]["seq"] > events[-1]["metadata"]["seq"]:
            events.append(out)
    return events


def of_type(events: list[dict[str, Any]], kind: str | None) -> list[dict[str, Any]]:
    return [e for e in events if e["metadata"].get("type") == kind]
