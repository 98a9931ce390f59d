"""The coalescing of a turn's text (agent/chat/events.py `coalesce`), driven with its real
queue: whatever the timing, the text arrives whole and in order, every other event keeps its
place relative to the text, and nothing comes after the end."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentchat.agent.chat.events import coalesce
from agentchat.agent.chat.turn_task import END_OF_STREAM

# A turn's output: text tokens, other events (a tool's start, say), and pauses between them.
STEPS = st.lists(st.one_of(
    st.tuples(st.just("token"), st.text(min_size=1, max_size=5)),
    st.tuples(st.just("event"), st.sampled_from(["tool_start", "tool_end", "status"])),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.001, 0.004]))), max_size=40)


async def _run(steps: list[tuple[str, Any]], flush_s: float) -> list[dict[str, Any]]:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def produce() -> None:
        for kind, value in steps:
            if kind == "token":
                queue.put_nowait({"type": "stream_token", "token": value})
            elif kind == "event":
                queue.put_nowait({"type": value})
            else:
                await asyncio.sleep(value)
        queue.put_nowait(END_OF_STREAM)

    async def consume() -> list[dict[str, Any]]:
        return [event async for event in coalesce(queue, flush_s)]

    producer = asyncio.create_task(produce())
    out = await asyncio.wait_for(consume(), 10)  # a lost end must fail, not hang
    await producer
    return out


def _shape(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Text before each other event, then that event; the text after the last."""
    shape, text = [], ""
    for event in events:
        if event["type"] == "stream_token":
            text += event["token"]
        else:
            shape.append((text, event["type"]))
            text = ""
    return [*shape, (text, "end")]


@settings(max_examples=60, deadline=None)
@given(steps=STEPS, flush_s=st.sampled_from([0.0, 0.002, 0.05]))
def test_text_whole_and_in_order_events_in_place(steps: list[tuple[str, Any]],
                                                  flush_s: float) -> None:
    put = [{"type": "stream_token", "token": v} if k == "token" else {"type": v}
           for k, v in steps if k != "pause"]
    out = asyncio.run(_run(steps, flush_s))
    assert _shape(out) == _shape(put)
    # and no empty text event
    assert all(e["token"] for e in out if e["type"] == "stream_token")
