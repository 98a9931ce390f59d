"""The coalescing of a turn's text: written through its `TurnText` (agent/chat/turn_text.py) as
the model node and the tools write it, read through `events.coalesce` as the run's pump reads
it, with the real queue: whatever the timing, the text arrives whole and in order, every other
event keeps its place relative to the text, nothing comes after the end, and tokens written
faster than the flush interval arrive together."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentchat.agent.chat.events import coalesce
from agentchat.agent.chat.turn_task import END_OF_STREAM
from agentchat.agent.chat.turn_text import TurnText

# A turn's output: text tokens, other events (a tool's start, say), and pauses between them.
STEPS = st.lists(st.one_of(
    st.tuples(st.just("token"), st.text(min_size=1, max_size=5)),
    st.tuples(st.just("event"), st.sampled_from(["tool_start", "tool_end", "status"])),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.001, 0.004]))), max_size=40)


async def _run(steps: list[tuple[str, Any]], flush_s: float) -> list[dict[str, Any]]:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    out = TurnText(queue, lambda: flush_s)

    async def produce() -> None:
        for kind, value in steps:
            if kind == "token":
                out.text(value)
            elif kind == "event":
                out.event({"type": value})
            else:
                await asyncio.sleep(value)
        out.event(END_OF_STREAM)

    async def consume() -> list[dict[str, Any]]:
        return [event async for event in coalesce(queue)]

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


def test_tokens_faster_than_the_interval_arrive_together() -> None:
    """At 0.1 s a flush, 20 tokens written 5 ms apart: the first at once, the others held
    back: no text event within the interval of the one before (but the end's, which sends
    what is left), and no timer left behind. Only lower bounds on time: a loaded machine
    may stretch the writer's pauses, never shorten the interval."""
    async def run() -> tuple[list[tuple[float, str]], TurnText]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        out = TurnText(queue, lambda: 0.1)
        loop = asyncio.get_running_loop()
        began = loop.time()
        got: list[tuple[float, str]] = []

        async def read() -> None:
            async for event in coalesce(queue):
                got.append((loop.time() - began, event["token"]))

        reader = asyncio.create_task(read())
        for i in range(20):
            out.text(f"t{i} ")
            await asyncio.sleep(0.005)
        out.event(END_OF_STREAM)
        await asyncio.wait_for(reader, 10)
        return got, out

    got, out = asyncio.run(run())
    assert "".join(t for _, t in got) == "".join(f"t{i} " for i in range(20))
    assert got[0][1] == "t0 " and len(got) >= 2, got
    held = [b[0] - a[0] for a, b in itertools.pairwise(got[:-1])]
    assert all(gap >= 0.099 for gap in held), got  # each waited for the interval
    assert len(got) <= 2 + (got[-1][0] / 0.1), got  # so at most one an interval
    assert out._timer is None  # the end flushed what was left
