"""A turn's text on its way to its run, coalesced where the model writes it (docs/protocol.md
§2, `stream_token`; docs/architecture.md, "Streaming at scale").

The model's tokens gather here, and one `stream_token` holding all of them goes on the turn's
queue at most once per flush interval (a function read at each flush: the hub's adaptive
interval). The first token after a quiet interval goes at once. Any other event first puts
the text gathered before it, so it keeps its place. A token costs a list append: no task
wakes per token and no timer is made per token, only one per flush. (Coalescing on the
reading side, as before, woke the run's pump and made a timeout for every model token: 3 %
of the agent's CPU at 200 live runs, py-spy.)
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any


class TurnText:
    """The turn's queue, as its producers write to it (`text` for the model's tokens,
    `event` for everything else)."""

    def __init__(self, queue: asyncio.Queue[dict[str, Any]],
                 flush_s: Callable[[], float] = lambda: 0.0) -> None:
        self.queue = queue
        self.flush_s = flush_s  # set by the turn's run (run_hub.py)
        self._pending: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._last = -math.inf  # loop time of the last stream_token put

    def text(self, token: str) -> None:
        if not token:
            return
        self._pending.append(token)
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        at = self._last + self.flush_s()
        if at <= loop.time():
            self.flush()
        else:
            self._timer = loop.call_at(at, self.flush)

    def event(self, event: dict[str, Any]) -> None:
        self.flush()
        self.queue.put_nowait(event)

    def flush(self) -> None:
        """The text gathered so far, as one stream_token (nothing when there is none)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending:
            self.queue.put_nowait({"type": "stream_token", "token": "".join(self._pending)})
            self._pending.clear()
            self._last = asyncio.get_running_loop().time()
