"""The `heartbeat` event (docs/protocol.md §2): an open `/chat` stream that has sent nothing
for `AGENTCHAT_AGENT_TUNING__STREAM_HEARTBEAT_S` sends `{type: "heartbeat", run_id, seq}` (`seq`
the last event's, not a new one), so a client notices a connection that died silently (a proxy that
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

    A task of its own reads `events` into a one-place queue (so a slow client still holds the
    source back), and the wait on the queue is what times out: cancelling an async generator's
    `__anext__` would end the stream, and a task per event cost ~40 µs (this costs a few)."""
    queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue(maxsize=1)

    async def read() -> None:
        try:
            async for event in events:
                await queue.put((True, event))
        except Exception as e:  # the consumer raises it, where the stream's errors are handled
            await queue.put((False, e))
            return
        await queue.put((False, None))

    reader = asyncio.create_task(read())
    try:
        while True:
            try:
                async with asyncio.timeout(interval_s):
                    ok, item = await queue.get()
            except TimeoutError:
                yield heartbeat(run_id, seq, conversation_id)
                continue
            if not ok:
                if item is not None:
                    raise item
                return
            meta = item.get("metadata") or {}
            seq = meta.get("seq", seq) if meta.get("run_id") else seq
            run_id = meta.get("run_id") or run_id
            conversation_id = meta.get("conversation_id") or conversation_id
            yield item
    finally:
        # The consumer left (a cancel, a dropped connection) or the source ended: stop the
        # reader, then let the source run its own cleanup.
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
