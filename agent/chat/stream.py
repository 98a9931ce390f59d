"""The `/chat` stream (docs/protocol.md §2, §5): one submit's events as ChatMessage dicts.

Every event carries `seq` (1, 2, 3… within one submit) and `conversation_id`; text is
coalesced per conversation so a stream keeps the model's pace under load (ARCHITECTURE,
"Streaming at scale"); an `error` is always the last event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from agentchat.agent.chat.inputs import file_text, parse_request
from agentchat.agent.chat.limits import RunSlot
from agentchat.agent.chat.service import ChatService
from agentchat.agent.chat.turns import END_OF_STREAM, Turn
from agentchat.agent.metrics import EVENTS, FIRST_EVENT
from agentchat.errors import AgentChatError
from agentchat.identity import bearer


def to_message(event: dict[str, Any], seq: int, conversation_id: str | None,
               text: str) -> dict[str, Any]:
    """One docs/protocol.md §2 ChatMessage dict."""
    kind = event["type"]
    meta = {k: v for k, v in event.items() if k not in ("type", "content")}
    meta.update(seq=seq, conversation_id=conversation_id)
    if kind == "final":
        return {"role": "assistant", "content": event["content"], "metadata": meta}
    meta["type"] = kind
    if kind == "confirm_required":
        content = event.get("prompt", "")
    elif kind == "error":
        content = f"Ошибка: {event.get('detail', '')}"
    else:
        content = text
    return {"role": "assistant", "content": content, "metadata": meta}


async def coalesce(queue: asyncio.Queue[dict[str, Any]],
                   flush_s: float) -> AsyncIterator[dict[str, Any]]:
    """Events from a turn with text merged: at most one stream_token per flush interval.

    Every token already queued joins the event being built, so a reader slowed by load gets
    the backlog in one event instead of one token per pull (a backlog that never shrinks).
    """
    buf = ""
    last = 0.0
    held: dict[str, Any] | None = None  # a non-text event met while draining
    while True:
        if held is not None:
            event, held = held, None
        elif buf:
            wait = last + flush_s - time.monotonic()
            if wait <= 0:
                yield {"type": "stream_token", "token": buf}
                buf, last = "", time.monotonic()
                continue
            try:
                event = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                continue
        else:
            event = await queue.get()
        if event["type"] == "stream_token":
            buf += event["token"]
            while held is None and not queue.empty():
                nxt = queue.get_nowait()
                if nxt["type"] == "stream_token":
                    buf += nxt["token"]
                else:
                    held = nxt
            continue
        if buf:
            yield {"type": "stream_token", "token": buf}
            buf, last = "", time.monotonic()
        if event is END_OF_STREAM:
            return
        yield event


async def run_chat(service: ChatService, *, message: Any, action: Any, conversation_id: Any,
                   uicontext: Any, user_id: Any, user_jwt: Any, env_id: Any,
                   headers: Any, session: str) -> AsyncIterator[dict[str, Any]]:
    seq = 0
    text = ""
    started = time.monotonic()
    cid: str | None = conversation_id if isinstance(conversation_id, str) else None
    turn: Turn | None = None
    slot: RunSlot | None = None
    try:
        req = parse_request(service.settings, message, action, conversation_id, uicontext,
                            user_id, user_jwt, env_id)
        cid = req.conversation_id
        principal, token = service.authenticate(req, bearer(headers))
        # Per-user limits (agent/chat/limits.py) before anything is opened or stored.
        slot = service.limits.admit(principal.sub)
        if req.files and req.action is None:
            # Read (off the event loop, the caller's own uploads only) before a conversation is
            # opened, so a refused file leaves nothing behind, not even an empty conversation.
            req.attached = await file_text(service.settings, req.files, principal.sub)
        cid = await service.open_conversation(req, principal)
        await service.take_lease(cid, session)
        turn, early = await service.submit(req, principal, token, cid, session)
        slot.hold(turn.task)  # the run slot is freed when the turn's task ends
        for event in early:
            seq += 1
            EVENTS.labels(event["type"]).inc()
            yield to_message(event, seq, cid, text)
        async for event in coalesce(turn.queue, service.settings.flush_interval_s):
            if event["type"] == "stream_token":
                text += event["token"]
            seq += 1
            if seq == 1:
                FIRST_EVENT.observe(time.monotonic() - started)
            EVENTS.labels(event["type"]).inc()
            yield to_message(event, seq, cid, text)
            if event["type"] in ("error", "final", "confirm_required"):
                break
    except AgentChatError as e:
        seq += 1
        EVENTS.labels("error").inc()
        yield to_message({"type": "error", "code": str(e.code), "detail": e.detail,
                          "retryable": e.retryable}, seq, cid, text)
    except asyncio.CancelledError:
        # submission.cancel(): stop the run now; the turn records the partial answer.
        if turn is not None and turn.task is not None:
            turn.task.cancel()
        raise
    except GeneratorExit:
        # The connection dropped: not a cancel. The turn runs on and is recorded.
        if turn is not None:
            turn.detach()
        raise
    finally:
        if slot is not None:
            slot.release_unless_held()  # the submit failed before a turn took it
