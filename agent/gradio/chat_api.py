"""The `/chat` function's body (docs/protocol.md §1, §2, §5): Gradio's seven inputs parsed
(inputs.py), the user token checked, then the chat domain's `submit` or `join`
(agent/chat/facade.py), and the run's events yielded as they come. An `error` is always the
last event; nothing here decides what a submit does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from agentchat.agent.chat import ChatRequest, Run, to_message, with_heartbeats
from agentchat.agent.gradio.inputs import parse_request
from agentchat.agent.metrics import EVENTS, FIRST_EVENT, FIRST_TOKEN, STREAM_JOINS
from agentchat.agent.wiring import Services
from agentchat.errors import AgentChatError, TokenError
from agentchat.identity import Principal, bearer
from agentchat.verified_tokens import Verifier
from agentchat.words import Lang, as_lang, turn_language

log = logging.getLogger("agentchat.agent.gradio.chat_api")


def authenticate(verifier: Verifier, req: ChatRequest,
                 header_token: str | None) -> Principal:
    """The user behind a submit: the forwarded `Authorization` token or `user_jwt` (both, only
    when they agree); `req.user_jwt` is then the verified token."""
    if header_token and req.user_jwt and header_token != req.user_jwt:
        raise TokenError("mismatch", "the forwarded token and user_jwt differ")
    token = header_token or req.user_jwt
    principal = verifier.verify(token)
    if req.user_id is not None and req.user_id != principal.sub:
        raise TokenError("user_mismatch", "user_id is not the token's subject")
    req.user_jwt = token
    return principal


async def run_chat(services: Services, *, message: Any, action: Any, conversation_id: Any,
                   uicontext: Any, user_id: Any, user_jwt: Any, env_id: Any, headers: Any,
                   session: str) -> AsyncGenerator[dict[str, Any], None]:
    chat = services.chat
    seq = 0
    started = time.monotonic()
    cid: str | None = conversation_id if isinstance(conversation_id, str) else None
    run: Run | None = None
    lang: Lang = "ru"
    beat_s = services.settings.tuning.stream_heartbeat_s
    try:
        req = parse_request(services.settings, services.uploads, message, action,
                            conversation_id, uicontext,
                            user_id, user_jwt, env_id)
        cid = req.conversation_id
        # Errors before a run speak the message's language; a resume or a join has none.
        lang = turn_language(req.text) if req.action in (None, "edit") else lang
        principal = authenticate(services.verifier, req, bearer(headers))
        req.tab_id = req.tab_id or session  # without a tab id, the Gradio session stands in
        if req.action == "join":
            try:
                async for event in with_heartbeats(chat.join(req, principal), beat_s,
                                                   run_id=req.run_id, seq=0,
                                                   conversation_id=cid):
                    seq = event["metadata"]["seq"]
                    EVENTS.labels(event["metadata"].get("type") or "final").inc()
                    yield event
            except AgentChatError as e:
                STREAM_JOINS.labels(str(e.code)).inc()
                raise
            STREAM_JOINS.labels("ok").inc()
            return
        run = await chat.submit(req, principal)
        cid = run.conversation_id
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
                          "retryable": e.retryable}, seq + 1, cid, "", None,
                         as_lang(e.lang) if e.lang else lang)
    except Exception:  # never a bare Gradio failure: the client gets a code (and no trace)
        log.exception("a /chat submit failed")
        EVENTS.labels("error").inc()
        yield to_message({"type": "error", "code": "INTERNAL", "detail": "internal error",
                          "retryable": True}, seq + 1, cid, "", None, lang)
    except asyncio.CancelledError:
        # submission.cancel() of the submit's own stream: stop the run now; the turn records
        # the partial answer. (A dropped connection is not a cancel: the run goes on, and a
        # cancelled join only stops following.)
        if run is not None and run.stop is not None:
            run.stop()
        raise
