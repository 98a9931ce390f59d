"""A lean `/chat` client over Gradio's own HTTP queue protocol (`queue/join` + the SSE stream
`queue/data`, sse_v3 diffs), for tests that must see the wire itself and for the soak.

`gradio_client` is the reference client (tests use it for ordinary turns); this one exists
because the fault tests need to drop or lose the connection on purpose and see how it ends
(a reset, not a hang), and because 200 soak users as threads of `gradio_client` would measure
the client more than the agent. One `RawChat` is one browser tab: one Gradio session, so the
multi-tab lease treats its submits as the same tab.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from gradio_client.utils import apply_diff

_FN_INDEX: dict[str, int] = {}


@dataclass
class Outcome:
    """What the client saw of one submit."""

    events: list[dict[str, Any]] = field(default_factory=list)
    event_id: str | None = None
    started: float = field(default_factory=time.monotonic)
    first_token_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)        # between any two events
    token_gaps_s: list[float] = field(default_factory=list)  # between two stream_tokens
    transport_error: str | None = None  # the connection broke (e.g. the agent was killed)
    completed: bool = False               # Gradio's process_completed arrived

    @property
    def last(self) -> dict[str, Any]:
        return self.events[-1]["metadata"] if self.events else {}

    @property
    def kind(self) -> str:
        """final | confirm_required | error | dropped | empty"""
        if self.transport_error:
            return "dropped"
        if not self.events:
            return "empty"
        meta = self.last
        return "final" if meta.get("message_id") else str(meta.get("type"))

    @property
    def conversation_id(self) -> str | None:
        for e in self.events:
            if e["metadata"].get("conversation_id"):
                return str(e["metadata"]["conversation_id"])
        return None

    def types(self) -> list[str]:
        return [str(e["metadata"].get("type", "final")) for e in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e["metadata"] for e in self.events if e["metadata"].get("type") == kind]


class RawChat:
    def __init__(self, agent_url: str, token: str, http: httpx.AsyncClient) -> None:
        self.agent_url = agent_url.rstrip("/")
        self.base = self.agent_url + "/api/agent/gradio/gradio_api"
        self.token = token
        self.http = http
        self.session = "raw-" + uuid.uuid4().hex
        self.headers = {"Authorization": f"Bearer {token}"}

    async def fn_index(self) -> int:
        if self.agent_url not in _FN_INDEX:
            cfg = (await self.http.get(self.agent_url + "/api/agent/gradio/config")).json()
            _FN_INDEX[self.agent_url] = next(d["id"] for d in cfg["dependencies"]
                                             if d.get("api_name") == "chat")
        return _FN_INDEX[self.agent_url]

    async def submit(self, text: Any, action: str | None = None, conversation_id: str | None = None,
                     *rest: Any, drop_after: int | None = None, timeout: float = 120.0,  # noqa: ASYNC109

                     on_event: Any = None) -> Outcome:
        """One submit; `drop_after=n` closes the connection after n events (a flaky network).
        `on_event(outcome)` is called after each event (a test can kill something there)."""
        out = Outcome()
        data = [text, action, conversation_id, *rest]
        data += [None] * (7 - len(data))
        try:
            join = await self.http.post(self.base + "/queue/join", headers=self.headers,
                                        timeout=timeout, json={
                                            "data": data, "fn_index": await self.fn_index(),
                                            "session_hash": self.session, "event_data": None})
            join.raise_for_status()
            out.event_id = join.json()["event_id"]
            await self._read(out, drop_after, timeout, on_event)
        except httpx.HTTPError as e:
            out.transport_error = type(e).__name__
        return out

    async def _read(self, out: Outcome, drop_after: int | None, timeout: float,  # noqa: ASYNC109

                    on_event: Any) -> None:
        value: Any = None
        last_at = out.started
        async with self.http.stream("GET", self.base + "/queue/data", headers=self.headers,
                                    params={"session_hash": self.session},
                                    timeout=httpx.Timeout(timeout, connect=10)) as resp:
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, out.event_id):
                    continue
                kind = msg.get("msg")
                if kind == "process_generating":
                    data = msg["output"]["data"][0]
                    value = data if value is None else apply_diff(value, data)
                    event = json.loads(json.dumps(value))  # a copy: diffs apply in place
                    meta = event.get("metadata") or {}
                    if out.events and meta.get("seq", 0) <= out.events[-1]["metadata"].get(
                            "seq", 0):
                        continue  # Gradio sends the last value twice
                    now = time.monotonic()
                    if meta.get("type") == "stream_token" and out.first_token_s is None:
                        out.first_token_s = now - out.started
                    elif out.events:
                        out.gaps_s.append(now - last_at)
                        if meta.get("type") == "stream_token" and out.events[-1][
                                "metadata"].get("type") == "stream_token":
                            out.token_gaps_s.append(now - last_at)
                    last_at = now
                    out.events.append(event)
                    if on_event is not None:
                        on_event(out)
                    if drop_after is not None and len(out.events) >= drop_after:
                        return  # leaving the block closes the connection
                elif kind == "process_completed":
                    out.completed = True
                    if not msg.get("success", True) and not out.events:
                        out.transport_error = "process_failed"
                    return

    async def cancel(self, out: Outcome) -> None:
        await self.http.post(self.base + "/cancel", headers=self.headers, timeout=10, json={
            "fn_index": await self.fn_index(), "session_hash": self.session,
            "event_id": out.event_id})
