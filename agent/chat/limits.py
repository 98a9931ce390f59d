"""Per-user limits on `/chat`: runs at once and submits a minute (RATE_LIMITED, retryable).

`run_chat` asks right after the token is verified and before the conversation is opened, so a
limited submit runs nothing and stores nothing. A submit counts when it is admitted (a refused
one does not extend the wait); its run slot is held until the turn's task ends (the run goes
on after a dropped connection, so it still counts), or released at once when the submit
failed before a turn started.

The counters live in this process, so the limits are **per replica**: with N agent replicas a
user can have up to N times as many (the ingress spreads sessions). That is acceptable because
the limits are a guard against one user (or one stolen token) monopolising a replica's model
calls, database connections and event loop, not a quota: each replica protects itself whatever
the others do, and the cap stays bounded by the chart's replica count. Shared counters in
PostgreSQL would cost a round trip (and a write) on every submit for no extra protection of
any one replica; a global quota, if ever needed, belongs at the ingress or the API gateway.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agentchat.agent.settings import AgentSettings
from agentchat.errors import AgentChatError, ErrorCode

WINDOW_S = 60.0


class UserLimits:
    """A sliding window of admitted submits and a count of live runs, per user `sub`."""

    def __init__(self, *, max_runs: int, max_per_minute: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_runs = max_runs
        self.max_per_minute = max_per_minute
        self._clock = clock
        self._submits: dict[str, deque[float]] = {}
        self._runs: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> UserLimits:
        return cls(max_runs=settings.max_concurrent_runs_per_user,
                   max_per_minute=settings.max_submits_per_minute_per_user)

    def admit(self, sub: str) -> RunSlot:
        """A slot for one submit of `sub`, or AgentChatError(RATE_LIMITED)."""
        now = self._clock()
        window = self._submits.get(sub)
        if window is not None:
            while window and window[0] <= now - WINDOW_S:
                window.popleft()
        if self._runs.get(sub, 0) >= self.max_runs:
            raise AgentChatError(ErrorCode.RATE_LIMITED,
                                 f"you already have {self.max_runs} runs going; wait for one "
                                 "to finish")
        if window is not None and len(window) >= self.max_per_minute:
            wait = max(1, round(window[0] + WINDOW_S - now))
            raise AgentChatError(ErrorCode.RATE_LIMITED,
                                 f"at most {self.max_per_minute} submits a minute; try again "
                                 f"in {wait} s")
        if window is None:
            window = self._submits[sub] = deque()
        window.append(now)
        self._runs[sub] = self._runs.get(sub, 0) + 1
        return RunSlot(self, sub)

    def _release(self, sub: str) -> None:
        left = self._runs.get(sub, 0) - 1
        if left > 0:
            self._runs[sub] = left
        else:
            self._runs.pop(sub, None)
            # Forget a user with nothing running once their window has emptied (bounded memory).
            window = self._submits.get(sub)
            if window is not None and (not window or window[-1] <= self._clock() - WINDOW_S):
                del self._submits[sub]

    def running(self, sub: str) -> int:
        return self._runs.get(sub, 0)


@dataclass
class RunSlot:
    """One admitted submit's run slot: `hold(task)` keeps it until the task ends;
    `release_unless_held()` (in run_chat's finally) frees a slot no turn took."""

    limits: UserLimits
    sub: str
    held: bool = False
    released: bool = False

    def hold(self, task: asyncio.Task[None] | None) -> None:
        if task is None or task.done():
            self._release()
            return
        self.held = True
        task.add_done_callback(lambda _: self._release())

    def release_unless_held(self) -> None:
        if not self.held:
            self._release()

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self.limits._release(self.sub)

