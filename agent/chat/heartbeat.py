"""The `heartbeat` event (docs/protocol.md §2): an open `/chat` stream that has sent nothing for
`AGENTCHAT_AGENT_STREAM_HEARTBEAT_S` sends `{type: "heartbeat", run_id, seq}` (`seq` the last
event's, not a new one), so a client notices a connection that died silently (a proxy that
drops it, a laptop that slept) after two missed beats instead of when TCP gives up.

`@gradio/client` does not surface the queue's own keep-alive to the caller, so the beat is an
event of ours; clients that ignore unknown types are unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any


def heartbeat(run_id: str | None, seq: int, conversation_id: str | None) -> dict[str, Any]:
    """One beat as a ChatMessage dict, shaped like every other event (events.to_message)."""
    common = {"seq": seq, "run_id": run_id, "conversation_id": conversation_id}
    return {"role": "assistant", "content": "", "metadata": {"type": "heartbeat"} | common}


async def with_heartbeats(events: AsyncIterator[dict[str, Any]], interval_s: float, *,
                          run_id: str | None = None, seq: int = 0,
                          conversation_id: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """`events`, with a beat after every `interval_s` in which none came.

    The next event is awaited in a task of its own, never cancelled by the wait for a beat:
    cancelling an async generator's `__anext__` would end the stream."""
    pending: asyncio.Task[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=interval_s)
            if not done:
                yield heartbeat(run_id, seq, conversation_id)
                continue
            task, pending = pending, None
            try:
                event = task.result()
            except StopAsyncIteration:
                return
            meta = event.get("metadata") or {}
            seq = meta.get("seq", seq) if meta.get("run_id") else seq
            run_id = meta.get("run_id") or run_id
            conversation_id = meta.get("conversation_id") or conversation_id
            yield event
    finally:
        # The consumer left (a cancel, a dropped connection): stop the read under way, then
        # let the source run its own cleanup.
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
