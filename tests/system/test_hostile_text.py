"""Issue 31, "one message freezes a replica": a 16 KB message built to make the offline
planner's text matching backtrack is answered like any other, and the replica's `/livez`
keeps answering while it is planned (the split is linear, planning is off the event loop).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.stack import Stack

LIVEZ_S = 0.5     # each /livez answer, while the hostile turn runs
TURN_S = 60.0     # the hostile turn's end: a liveness bound, not a benchmark
SPACES = 16_000   # with the words around them, just under the 16 KB text limit

# The old split backtracked about cubically on a whitespace run with no separator after it:
# 500 spaces took 0.5 s, these would have taken hours.
HOSTILE = {
    "spaces": "a" + " " * SPACES + "b",
    "conjunction-glued": "покажи здоровье prod" + " " * SPACES + "иb",
    "comma-spaces": "найди дашборды," + " " * SPACES + "потомb",
}


async def _turn_while_polling(stack: Stack, text: str) -> tuple[Outcome | None, list[float]]:
    """The turn's outcome, and how long each /livez poll took while it ran; a stalled poll
    ends the wait at once (no outcome: the test has failed, the frozen turn is not waited for)."""
    token = stack.token("alice")  # a viewer's roles: reads run, no card
    async with httpx.AsyncClient() as http:
        chat = RawChat(stack.agent.url, token, http)
        turn = asyncio.create_task(chat.submit(text, timeout=TURN_S))
        polls: list[float] = []
        async with httpx.AsyncClient(timeout=LIVEZ_S * 4) as probe:
            while not turn.done():
                t0 = time.monotonic()
                try:
                    (await probe.get(stack.agent.url + "/livez")).raise_for_status()
                except httpx.HTTPError:
                    pass  # a timeout: recorded as slow below
                polls.append(time.monotonic() - t0)
                if polls[-1] >= LIVEZ_S:
                    turn.cancel()
                    return None, polls
                await asyncio.sleep(0.05)
        return await turn, polls


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_a_backtracking_message_keeps_the_replica_live(stack: Stack, name: str) -> None:
    text = HOSTILE[name]
    assert len(text.encode()) <= 16 * 1024
    out, polls = await _turn_while_polling(stack, text)
    assert polls, "the turn ended before /livez was asked once"
    assert max(polls) < LIVEZ_S, f"/livez took {max(polls):.2f} s during the turn"
    assert out is not None and out.kind == "final", out and (out.kind, out.last)


async def test_control_a_long_run_with_a_separator_still_splits(stack: Stack) -> None:
    """The split's other side: the same run of spaces before "и " still separates two
    requests, each its own call (two read tools, no card)."""
    text = "покажи здоровье prod" + " " * SPACES + "и найди дашборды продаж"
    out, polls = await _turn_while_polling(stack, text)
    assert out is not None and out.kind == "final", out and (out.kind, out.last)
    assert [e["tool"] for e in out.of("tool_start")] == ["get_health_summary",
                                                         "search_dashboards"]
    assert polls and max(polls) < LIVEZ_S
