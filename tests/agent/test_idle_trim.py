"""The replica's idle trim (agent/chat/run_hub.py RunHub._idle_trim): once no run has been live for
`idle_trim_s`, one garbage collection and glibc's malloc_trim; a submit admitted first
cancels it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.chat.turn_task import END_OF_STREAM, Turn
from agentchat.agent.settings import AgentSettings


def settings(idle_trim_s: float) -> AgentSettings:
    return AgentSettings(mode="dev", tuning={"idle_trim_s": idle_trim_s, "run_events": False})


def turn(n: int) -> Turn:
    runtime: Any = SimpleNamespace(lang="en", user_jwt="", keep_token=True)
    return Turn(f"c{n}", f"t{n}", "tab", runtime, None)


async def one_run(hub: RunHub, t: Turn) -> None:
    run = hub.start(t, "message", [])
    t.emit({"type": "stream_token", "token": "hi"})
    t.emit({"type": "final", "message_id": "m", "content": "hi"})
    t.emit(END_OF_STREAM)
    async for _ in run.follow(0):
        pass
    await asyncio.sleep(0)  # the pump's done callback


def test_trims_once_idle_and_a_new_run_cancels_it() -> None:
    async def main() -> None:
        hub = RunHub(settings=settings(0.2), pool=None)  # type: ignore[arg-type]
        await one_run(hub, turn(1))
        await asyncio.sleep(0.1)
        await one_run(hub, turn(2))  # within idle_trim_s: the first trim is cancelled
        await asyncio.sleep(0.1)
        assert hub.trims == 0
        await asyncio.sleep(0.3)
        assert hub.trims == 1
        off = RunHub(settings=settings(0), pool=None)  # type: ignore[arg-type]
        await one_run(off, turn(3))
        await asyncio.sleep(0.1)
        assert off.trims == 0

    asyncio.run(main())


def test_a_submit_admitted_calls_the_trim_off_before_its_run_starts() -> None:
    async def main() -> None:
        hub = RunHub(settings=settings(0.2), pool=None)  # type: ignore[arg-type]
        await one_run(hub, turn(1))
        hub.admit()  # a burst's first submit: its turn is still starting (selection, rows)
        await asyncio.sleep(0.4)
        assert hub.trims == 0, "no full collection while turns start"
        await one_run(hub, turn(2))
        await asyncio.sleep(0.3)
        assert hub.trims == 1

    asyncio.run(main())
