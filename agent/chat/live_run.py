"""A run as a replica keeps it (docs/protocol.md §4, "Runs"): its events, numbered, in memory,
the answer once, and its followers; the hub (run_hub.py) pumps, stores and fences it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from agentchat.agent.chat.events import with_text
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.words import error_text

# A run's last event: after it the run's stream ends.
TERMINAL = frozenset({"final", "confirm_required", "error"})
STATUS_AFTER = {"final": "completed", "confirm_required": "awaiting_confirmation",
                "error": "failed"}
LOST_DETAIL = "the agent replica running this answer stopped; retry to complete it"
# Why no replica went on with a lost run (its RUN_LOST event's `reason`), in its detail's words.
LOST_REASONS = {"replica_stopped": "",
                "attempts_used_up": "попытки продолжить его на другой реплике исчерпаны",
                "unresumable": "ни одна реплика не может его продолжить"}


def lost_event_texts(reason: str = "replica_stopped") -> tuple[str, str]:
    """The RUN_LOST event's (content, detail), as events.to_message words an error. Marked by
    whichever replica notices, which does not know the turn's language: Russian, the
    product's default; the detail says why no replica went on with it."""
    content, detail = error_text("RUN_LOST", LOST_DETAIL, "ru")
    why = LOST_REASONS.get(reason, "")
    return (f"{content} ({why})", f"{detail} ({why})") if why else (content, detail)


def join_expired() -> AgentChatError:
    return AgentChatError(ErrorCode.JOIN_EXPIRED,
                          "those events are no longer kept; reload the history")


def event_type(message: dict[str, Any]) -> str:
    meta = message.get("metadata") or {}
    return str(meta.get("type") or "final")


@dataclass(eq=False)
class Run:
    """One run's events (ChatMessage dicts with `seq` and `run_id`), kept as `to_kept` makes
    them: the answer once (`text`), and per event where it ended (`ends`), so an event is
    sent with the answer as of it (`with_text`) and memory grows with the answer, not with
    its square."""

    run_id: str
    conversation_id: str
    turn_id: str
    tab_id: str
    kind: str
    max_events: int
    events: list[dict[str, Any]] = field(default_factory=list)
    first_seq: int = 1  # seq of events[0]; older ones were dropped (max_events)
    written_seq: int = 0  # the writer stored every event up to this seq
    recorded: bool = False  # its row exists
    status: str = "running"
    status_written: bool = False
    text: str = ""  # the answer so far: a stream_token's content
    ends: list[int] = field(default_factory=list)  # len(text) after each kept event
    base_end: int = 0  # len(text) before events[0] (older events were dropped)
    based_seq: int = 1  # the first kept seq whose stored row carries its `_base`
    last_at: float = 0.0  # when the last event was added (EVENT_GAP)
    stop: Callable[[], Any] | None = None  # cancels the run's turn (the submit's own stream)
    after_seq: int | None = None  # a taken-over run: the last stored seq it went on from
    epoch: int = 1  # the run's owner epoch as this replica holds it (a takeover raises it)
    token: str | None = None  # the user token a new owner resumes it with (first write only)
    fence: Callable[[], Any] | None = None  # stops the run's turn without a record written
    halt: Callable[[], Any] | None = None  # the same, its task left to meet the fence (drain)
    fenced: bool = False
    verified_at: float = 0.0  # when PostgreSQL last confirmed the epoch is ours (monotonic)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.events) - 1

    @property
    def done(self) -> bool:
        return self.status != "running"

    def append(self, message: dict[str, Any]) -> None:
        """A kept event (`to_kept`), after `text` took its token."""
        self.events.append(message)
        self.ends.append(len(self.text))
        if len(self.events) > self.max_events:
            drop = len(self.events) - self.max_events
            self.base_end = self.ends[drop - 1]
            del self.events[:drop]
            del self.ends[:drop]
            self.first_seq += drop
        self._wake()

    def sent(self, index: int) -> dict[str, Any]:
        """events[index] as sent: with the answer as of it."""
        return with_text(self.events[index], self.text[:self.ends[index]])

    def base(self) -> str:
        """The answer before the first kept event (a trimmed run's stored `_base`)."""
        return self.text[:self.base_end]

    def finish(self, status: str) -> None:
        self.status = status
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, after_seq: int) -> AsyncIterator[dict[str, Any]]:
        """The events after `after_seq`, then live ones until the run's last."""
        cursor = after_seq
        while True:
            changed = self._changed
            if cursor < self.first_seq - 1:
                raise join_expired()
            # One event at a time, by seq (a trim while the reader is away moves indices):
            # each is built with its answer only when it is sent.
            while cursor < self.last_seq:
                if cursor < self.first_seq - 1:
                    raise join_expired()
                message = self.sent(cursor + 1 - self.first_seq)
                cursor += 1
                yield message
                if event_type(message) in TERMINAL:
                    return
            if self.done and cursor >= self.last_seq:
                return
            await changed.wait()
