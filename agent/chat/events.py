"""The events a client sees (docs/protocol.md §2): ChatMessage dicts, and a turn's queued
text joined when its reader falls behind (the text is coalesced as it is written:
turn_text.py), so a stream keeps the model's pace under load (docs/architecture.md,
"Streaming at scale").

Every event carries `seq` (1, 2, 3… within its run), `run_id` (null on an error raised before
a run exists) and `conversation_id`; a stream_token's `content` is the whole answer so far.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from agentchat.agent.chat.turn_task import END_OF_STREAM
from agentchat.words import Lang, error_text


def to_message(event: dict[str, Any], seq: int, conversation_id: str | None,
               text: str, run_id: str | None = None, lang: Lang = "ru") -> dict[str, Any]:
    """One docs/protocol.md §2 ChatMessage dict; an error's words in the turn's `lang`."""
    kind = event["type"]
    meta = {k: v for k, v in event.items() if k not in ("type", "content")}
    meta.update(seq=seq, conversation_id=conversation_id, run_id=run_id)
    if kind == "final":
        return {"role": "assistant", "content": event["content"], "metadata": meta}
    meta["type"] = kind
    if kind == "confirm_required":
        content = event.get("prompt", "")
    elif kind == "error":
        content, meta["detail"] = error_text(str(event.get("code")),
                                             str(event.get("detail") or ""), lang)
    elif kind == "run_resumed":
        content = ""  # the answer starts again: a client clears the run's partial text
    else:
        content = text
    return {"role": "assistant", "content": content, "metadata": meta}


# Events whose `content` is the answer so far (to_message's `text`); the rest carry their own.
OWN_CONTENT = frozenset({"final", "confirm_required", "error", "run_resumed"})


def to_kept(event: dict[str, Any], seq: int, conversation_id: str | None,
            run_id: str | None, lang: Lang = "ru") -> dict[str, Any]:
    """The ChatMessage dict as a run keeps it, in memory and in run_events: without `content`
    where that is the answer so far (`with_text` puts it back when the event is sent). So a
    long answer is kept once, not once per stream_token (which grew with its square)."""
    message = to_message(event, seq, conversation_id, "", run_id, lang)
    if event["type"] not in OWN_CONTENT:
        del message["content"]
    return message


def with_text(kept: dict[str, Any], text: str) -> dict[str, Any]:
    """The event as sent: a kept event without `content` gets `text`, the answer as of it.
    Rows stored before deltas carry their content, and are sent as stored."""
    if "content" in kept:
        return kept
    return {"role": kept["role"], "content": text, "metadata": kept["metadata"]}


def text_after(text: str, kept: dict[str, Any]) -> str:
    """The answer after a kept event, given the answer before it."""
    meta = kept.get("metadata") or {}
    kind = meta.get("type") or "final"
    if kind == "run_resumed":  # a takeover: the answer starts again
        return ""
    if kind in OWN_CONTENT:
        return text
    if "content" in kept:  # a row stored whole (before deltas): its content is the answer
        return str(kept["content"])
    base = kept.get("_base")
    if isinstance(base, str):
        text = base
    return text + str(meta.get("token") or "") if kind == "stream_token" else text


async def coalesce(queue: asyncio.Queue[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """A turn's events (its text already coalesced as it was written: turn_text.py), with
    every stream_token already queued behind one joined to it: a reader slowed by load gets
    the backlog in one event instead of one per pull (a backlog that never shrinks)."""
    held: dict[str, Any] | None = None  # a non-text event met while draining
    while True:
        if held is not None:
            event, held = held, None
        else:
            event = await queue.get()
        if event["type"] == "stream_token":
            buf = event["token"]
            while not queue.empty():
                nxt = queue.get_nowait()
                if nxt["type"] != "stream_token":
                    held = nxt
                    break
                buf += nxt["token"]
            yield {"type": "stream_token", "token": buf}
            continue
        if event is END_OF_STREAM:
            return
        yield event
