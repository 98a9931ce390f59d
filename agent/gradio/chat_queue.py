"""Gradio's queue wire for the `/chat` function, served by the agent (docs/protocol.md §1).

A client submits in two requests, as @gradio/client and gradio_client speak Gradio's `sse_v3`
protocol: `POST …/gradio_api/queue/join` answers `{event_id}`, and `GET
…/gradio_api/queue/data?session_hash=` streams the session's messages as server-sent events
(`estimation`, `process_starts`, `process_generating` whose data after the first is
`gradio.utils.diff` of the last, `process_completed` with the whole last event, then
`close_stream` once none of the session's submits is pending); `POST …/gradio_api/cancel`
stops a submit (its run stops, docs/protocol.md §2).

Why not Gradio's own queue: per submit it polls for work, builds the session's block configs,
creates our async generator in a worker thread, and per message makes a pydantic model, a
timeout task and a disconnect check. Behind a burst of 100 new conversations, every first
token waited for nearly every other start (bench/README.md, "The turn start"). Here a submit is
one task that follows the run and queues each message's bytes; a stream writes whatever is
queued in one chunk. These routes are matched before Gradio's mount, behind the same guards
(session_guard.py: a session and an event belong to the user who named them; file_guard.py);
every other route of the mount (config, upload, files, `call/chat`) stays Gradio's.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from gradio.utils import diff, get_heartbeat_rate
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers

from agentchat.agent.gradio.chat_api import run_chat
from agentchat.agent.wiring import ServiceHolder
from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response
from agentchat.telemetry import detached

# /chat's inputs, in the order of its signature (blocks.py; docs/protocol.md §1).
INPUTS = ("message", "action", "conversation_id", "uicontext", "user_id", "user_jwt", "env_id")
_CLOSE = b'data: {"msg":"close_stream","event_id":null}\n\n'
_HEARTBEAT = b'data: {"msg":"heartbeat","event_id":null}\n\n'


class JoinBody(BaseModel):
    """What @gradio/client posts to queue/join (Gradio's PredictBody, the fields we read)."""
    model_config = ConfigDict(extra="ignore")
    data: list[Any] = Field(max_length=len(INPUTS))
    fn_index: int | None = None
    session_hash: str = Field(min_length=1, max_length=128)


class CancelBody(BaseModel):
    """What @gradio/client posts to cancel (Gradio's CancelBody)."""
    model_config = ConfigDict(extra="ignore")
    event_id: str = Field(max_length=128)
    session_hash: str = Field(max_length=128)
    fn_index: int | None = None


@dataclass
class _Session:
    """One client's stream: the bytes of its messages not yet read, the submits not yet
    delivered as completed, and their tasks (for cancel)."""
    messages: asyncio.Queue[tuple[bytes, str | None]] = field(default_factory=asyncio.Queue)
    pending: set[str] = field(default_factory=set)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    alive: bool = True  # False once a reader dropped: submits stop following (runs go on)
    readers: int = 0


def _frame(message: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(message) + b"\n\n"


class ChatQueue:
    """The sessions of this process's `/chat` submits (a session is sticky to its replica)."""

    def __init__(self, holder: ServiceHolder, fn_index: int, concurrency: int,
                 unread_ttl_s: float, max_sessions: int) -> None:
        self.holder = holder
        self.fn_index = fn_index
        self.sessions: dict[str, _Session] = {}
        self.slots = asyncio.Semaphore(concurrency)  # as Gradio's concurrency_limit
        self.waiting = 0
        self.unread_ttl_s = unread_ttl_s  # a session nobody reads is dropped this long after
        self.max_sessions = max_sessions  # over it, the oldest unread session is dropped

    def router(self, mount_path: str) -> APIRouter:
        api = mount_path.rstrip("/") + "/gradio_api"
        router = APIRouter(include_in_schema=False)  # Gradio's wire, not a REST route
        router.add_api_route(api + "/queue/join", self.join, methods=["POST"])
        router.add_api_route(api + "/queue/data", self.data, methods=["GET"])
        router.add_api_route(api + "/cancel", self.cancel, methods=["POST"])
        return router

    async def join(self, body: JoinBody, request: Request) -> Response:
        # FastAPI parses the body: only as JSON (a cross-site form or text/plain post is 422,
        # as it was on Gradio's route), and a malformed one is 422 INVALID_REQUEST.
        if body.fn_index is not None and body.fn_index != self.fn_index:
            return error_response(404, ErrorCode.NOT_FOUND, "no such function")
        session = self.sessions.get(body.session_hash)
        if session is None or not session.alive:
            session = self.sessions[body.session_hash] = _Session()
            if len(self.sessions) > self.max_sessions:
                self._drop_oldest_unread()
        event_id = uuid.uuid4().hex
        session.pending.add(event_id)
        inputs = dict(zip(INPUTS, body.data, strict=False))
        session.tasks[event_id] = asyncio.create_task(
            self._follow(session, body.session_hash, event_id, inputs, request.headers),
            context=detached())
        return JSONResponse({"event_id": event_id})

    async def _follow(self, session: _Session, session_hash: str, event_id: str,
                      inputs: dict[str, Any], headers: Headers) -> None:
        """One submit: run_chat's events as Gradio's messages, then its completion. A dropped
        stream stops the following at the next event (run_chat's own heartbeat bounds the
        wait), closing run_chat without a cancel: the run goes on, to be joined."""
        last: Any = None
        try:
            self.waiting += 1
            self._put(session, {"msg": "estimation", "event_id": event_id,
                                "rank": self.waiting - 1, "queue_size": self.waiting,
                                "rank_eta": None})
            try:
                await self.slots.acquire()
            finally:
                self.waiting -= 1
            try:
                self._put(session, {"msg": "process_starts", "event_id": event_id, "eta": None})
                events = run_chat(self.holder.get(), headers=headers, session=session_hash,
                                  **{name: inputs.get(name) for name in INPUTS})
                try:
                    async for event in events:
                        if not session.alive:
                            return
                        self._put(session, {
                            "msg": "process_generating", "event_id": event_id,
                            "output": {"data": [event if last is None else diff(last, event)],
                                       "is_generating": True},
                            "success": True})
                        last = event
                finally:
                    await events.aclose()
            finally:
                self.slots.release()
            self._put(session, {"msg": "process_completed", "event_id": event_id,
                                "output": {"data": [last], "is_generating": False},
                                "success": True}, completes=event_id)
        finally:
            session.tasks.pop(event_id, None)
            if not session.readers:
                asyncio.get_running_loop().call_later(self.unread_ttl_s, self._drop_unread,
                                                      session_hash, session)

    async def data(self, request: Request) -> Response:
        session_hash = request.query_params.get("session_hash", "")
        session = self.sessions.get(session_hash)
        if session is None:  # as Gradio answers an unknown session: one error message
            body = _frame({"msg": "unexpected_error", "message": "404: Not Found",
                           "session_not_found": True, "success": False})
            return Response(body, media_type="text/event-stream")
        return StreamingResponse(self._stream(session_hash, session),
                                 media_type="text/event-stream")

    async def _stream(self, session_hash: str, session: _Session) -> AsyncIterator[bytes]:
        """Everything queued, one chunk per wake-up, until the last pending submit's
        completion (then close_stream) or the client goes (cancelled here by Starlette)."""
        session.readers += 1
        beat = asyncio.create_task(self._beat(session))
        closed = False
        try:
            while True:
                chunk, completed = [], False
                frame, done = await session.messages.get()
                while True:
                    chunk.append(frame)
                    if done is not None:
                        session.pending.discard(done)
                        completed = True
                    if session.messages.empty():
                        break
                    frame, done = session.messages.get_nowait()
                closed = completed and not session.pending
                if closed:
                    chunk.append(_CLOSE)
                yield b"".join(chunk)
                if closed:
                    return
        finally:
            beat.cancel()
            session.readers -= 1
            if closed or not session.readers:
                # Closed: nothing is pending. Dropped: its submits stop following (Gradio's
                # clean_events); a later join starts a new session.
                if not closed:
                    session.alive = False
                if self.sessions.get(session_hash) is session:
                    del self.sessions[session_hash]

    async def cancel(self, body: CancelBody) -> Response:
        """Gradio's cancel: the submit's task is cancelled (run_chat stops its run), and the
        stream gets its completion, empty, as Gradio sends it."""
        session = self.sessions.get(body.session_hash)
        event_id = body.event_id
        task = session.tasks.pop(event_id, None) if session else None
        if session is not None and task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._put(session, {"msg": "process_completed", "event_id": event_id,
                                "output": {}, "success": True}, completes=event_id)
        return JSONResponse({"success": True})

    async def _beat(self, session: _Session) -> None:
        rate = get_heartbeat_rate()
        while True:
            await asyncio.sleep(rate)
            session.messages.put_nowait((_HEARTBEAT, None))

    def _put(self, session: _Session, message: dict[str, Any],
             completes: str | None = None) -> None:
        session.messages.put_nowait((_frame(message), completes))

    def _drop_oldest_unread(self) -> None:
        """Its submits stop following at their next event; their runs go on."""
        oldest = next((h for h, s in self.sessions.items() if not s.readers), None)
        if oldest is not None:
            self.sessions.pop(oldest).alive = False

    def _drop_unread(self, session_hash: str, session: _Session) -> None:
        if not session.readers and not session.tasks \
                and self.sessions.get(session_hash) is session:
            del self.sessions[session_hash]
