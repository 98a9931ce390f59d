"""Per-user limits on `/chat`: runs at once, streams at once (runs and joins together) and
submits a minute (RATE_LIMITED, retryable); `PerMinute` is also the REST writes' and the
uploads' window.

`Chat.submit` (chat/facade.py) asks right after the token is verified, before anything is
stored, so a limited submit runs nothing and stores nothing. A submit counts when it is
admitted (a refused one does not extend the wait); its run slot is held until the turn's task
ends (the run goes on after a dropped connection, so it still counts), or released at once when
the submit failed before a turn started. A join holds a stream slot while it follows (its
generator's end, a cancel or a dropped connection frees it): without one, a user could hold
hundreds of a replica's streams by joining their own run. The counters live in this process, so
the limits are **per replica**: with N agent replicas a user can have up to N times as many
(the ingress spreads sessions). That is acceptable because the limits are a guard against one
user (or one stolen token) monopolising a replica's model calls, database connections and event
loop, not a quota: each replica protects itself whatever the others do, and the cap stays
bounded by the chart's replica count. Shared counters in PostgreSQL would cost a round trip
(and a write) on every submit for no extra protection of any one replica; a global quota, if
ever needed, belongs at the ingress or the API gateway.
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


class PerMinute:
    """A sliding minute of admitted events per user `sub`: `admit` counts one or refuses with
    RATE_LIMITED saying how long to wait. Users whose minute has emptied are forgotten
    (bounded memory). The one window of the agent's per-user rates: /chat submits, REST
    writes, uploads."""

    def __init__(self, limit: int, what: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.what = what  # "submits", "uploads": the refusal's words
        self._clock = clock
        self._events: dict[str, deque[float]] = {}

    def retry_after(self, sub: str) -> int:
        """Seconds until `sub` may go again; 0: now."""
        now = self._clock()
        window = self._events.get(sub)
        if window is None:
            return 0
        while window and window[0] <= now - WINDOW_S:
            window.popleft()
        if len(window) < self.limit:
            return 0
        return max(1, round(window[0] + WINDOW_S - now))

    def admit(self, sub: str) -> None:
        wait = self.retry_after(sub)
        if wait:
            raise AgentChatError(ErrorCode.RATE_LIMITED, f"at most {self.limit} {self.what} a "
                                 f"minute; try again in {wait} s", retry_after=wait)
        self._events.setdefault(sub, deque()).append(self._clock())
        if len(self._events) > 1024:  # now and then, not on every event
            self.forget_idle()

    def forget_idle(self) -> None:
        cutoff = self._clock() - WINDOW_S
        for sub in [s for s, w in self._events.items() if not w or w[-1] <= cutoff]:
            del self._events[sub]


class UserLimits:
    """Per user `sub`: a sliding minute of admitted submits, the live runs, and the streams
    (runs and joins together: one budget for what holds a replica's stream slots)."""

    def __init__(self, *, max_runs: int, max_per_minute: int, max_streams: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_runs = max_runs
        self.max_per_minute = max_per_minute
        self.max_streams = max_streams
        self._submits = PerMinute(max_per_minute, "submits", clock=clock)
        self._runs: dict[str, int] = {}
        self._joins: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> UserLimits:
        return cls(max_runs=settings.tuning.max_concurrent_runs_per_user,
                   max_per_minute=settings.tuning.max_submits_per_minute_per_user,
                   max_streams=settings.tuning.max_streams_per_user)

    def admit(self, sub: str) -> RunSlot:
        """A slot for one submit of `sub`, or AgentChatError(RATE_LIMITED)."""
        if self._runs.get(sub, 0) >= self.max_runs:
            raise AgentChatError(ErrorCode.RATE_LIMITED,
                                 f"you already have {self.max_runs} runs going; wait for one "
                                 "to finish")
        self._check_streams(sub)
        self._submits.admit(sub)
        self._runs[sub] = self._runs.get(sub, 0) + 1
        return RunSlot(self, sub)

    def admit_join(self, sub: str) -> RunSlot:
        """A stream slot for one join of `sub` (released when the join ends), or
        AgentChatError(RATE_LIMITED). Joins are not submits: they start nothing."""
        self._check_streams(sub)
        self._joins[sub] = self._joins.get(sub, 0) + 1
        return RunSlot(self, sub, join=True)

    def _check_streams(self, sub: str) -> None:
        if self.streams(sub) >= self.max_streams:
            raise AgentChatError(ErrorCode.RATE_LIMITED,
                                 f"you already have {self.max_streams} streams open (runs and "
                                 "joins); close one first")

    def _release(self, sub: str, join: bool = False) -> None:
        counts = self._joins if join else self._runs
        left = counts.get(sub, 0) - 1
        if left > 0:
            counts[sub] = left
        else:
            counts.pop(sub, None)  # bounded memory: a user with nothing open is forgotten

    def running(self, sub: str) -> int:
        return self._runs.get(sub, 0)

    def streams(self, sub: str) -> int:
        return self._runs.get(sub, 0) + self._joins.get(sub, 0)


@dataclass
class RunSlot:
    """One admitted submit's run slot (or a join's stream slot): `hold(task)` keeps it until
    the task ends; `release_unless_held()` (in Chat.submit's finally) frees a slot no turn took."""

    limits: UserLimits
    sub: str
    join: bool = False
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
            self.limits._release(self.sub, self.join)
