"""The `/chat` stream (docs/protocol.md §2, §4, §5): a submit follows the run it starts, a join
follows the run it names (agent/chat/events.py words the events); an `error` is always the
last event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from agentchat.agent.chat.events import to_message
from agentchat.agent.chat.heartbeat import with_heartbeats
from agentchat.agent.chat.inputs import file_text, parse_request
from agentchat.agent.chat.limits import RunSlot
from agentchat.agent.chat.service import ChatService
from agentchat.agent.chat.turns import Turn
from agentchat.agent.metrics import EVENTS, FIRST_EVENT, FIRST_TOKEN, STREAM_JOINS
from agentchat.errors import AgentChatError
from agentchat.identity import bearer
from agentchat.words import Lang, turn_language

log = logging.getLogger("agentchat.agent.chat.stream")


async def run_chat(service: ChatService, *, message: Any, action: Any, conversation_id: Any,
                   uicontext: Any, user_id: Any, user_jwt: Any, env_id: Any,
                   headers: Any, session: str) -> AsyncIterator[dict[str, Any]]:
    seq = 0
    started = time.monotonic()
    cid: str | None = conversation_id if isinstance(conversation_id, str) else None
    turn: Turn | None = None
    slot: RunSlot | None = None
    lang: Lang = "ru"
    beat_s = service.settings.stream_heartbeat_s
    try:
        req = parse_request(service.settings, message, action, conversation_id, uicontext,
                            user_id, user_jwt, env_id)
        cid = req.conversation_id
        # Errors before a run speak the message's language; a resume or a join has none.
        lang = turn_language(req.text) if req.action is None else lang
        principal, token = service.authenticate(req, bearer(headers))
        if req.action == "join":
            # One of the user's streams while it follows (agent/chat/limits.py).
            slot = service.limits.admit_join(principal.sub)
            try:
                async for event in with_heartbeats(service.join(req, principal), beat_s,
                                                   run_id=req.run_id, seq=req.last_seq,
                                                   conversation_id=cid):
                    seq = event["metadata"]["seq"]
                    EVENTS.labels(event["metadata"].get("type") or "final").inc()
                    yield event
            except AgentChatError as e:
                STREAM_JOINS.labels(str(e.code)).inc()
                raise
            STREAM_JOINS.labels("ok").inc()
            return
        # Per-user limits (agent/chat/limits.py) and the replica's own before anything is
        # opened or stored.
        slot = service.limits.admit(principal.sub)
        service.hub.admit()
        if req.files and req.action is None:
            # Read (off the event loop, the caller's own uploads only) before a conversation is
            # opened, so a refused file leaves nothing behind, not even an empty conversation.
            req.attached = await file_text(service.settings, req.files, principal.sub)
        tab = req.tab_id or session  # without a tab id, the Gradio session stands in
        if req.conversation_id is None and req.action is None:  # a new conversation
            turn, run = await service.start_conversation(req, principal, token, tab)
            cid = turn.conversation_id
        else:
            cid = await service.open_conversation(req, principal)
            if req.action is not None:
                lang = await service.conversation_language(cid)
            await service.take_lease(cid, tab)
            turn, run = await service.submit(req, principal, token, cid, tab)
        slot.hold(turn.task)  # the run slot is freed when the turn's task ends
        first_token = True
        async for event in with_heartbeats(run.follow(0), beat_s, run_id=run.run_id,
                                           conversation_id=cid):
            seq = event["metadata"]["seq"]
            kind = event["metadata"].get("type") or "final"
            if kind == "heartbeat":
                yield event
                continue
            if seq == 1:
                FIRST_EVENT.observe(time.monotonic() - started)
            if first_token and kind == "stream_token":
                FIRST_TOKEN.observe(time.monotonic() - started)
                first_token = False
            EVENTS.labels(kind).inc()
            yield event
    except AgentChatError as e:
        EVENTS.labels("error").inc()
        yield to_message({"type": "error", "code": str(e.code), "detail": e.detail,
                          "retryable": e.retryable}, seq + 1, cid, "", None, lang)
    except Exception:  # never a bare Gradio failure: the client gets a code (and no trace)
        log.exception("a /chat submit failed")
        EVENTS.labels("error").inc()
        yield to_message({"type": "error", "code": "INTERNAL", "detail": "internal error",
                          "retryable": True}, seq + 1, cid, "", None, lang)
    except asyncio.CancelledError:
        # submission.cancel() of the submit's own stream: stop the run now; the turn records
        # the partial answer. (A dropped connection is not a cancel: the run goes on, and a
        # cancelled join only stops following.)
        if turn is not None and turn.task is not None:
            turn.task.cancel()
        raise
    finally:
        if slot is not None:
            slot.release_unless_held()  # the submit failed before a turn took it
