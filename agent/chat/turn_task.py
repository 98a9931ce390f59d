"""A turn runs as a server-side task that outlives the connection (docs/protocol.md §4).

The task drives the graph, turns what it streams into docs/protocol.md §2 events, records the turn
as it happens, and hands the events to its run (agent/chat/run_hub.py). A dropped connection only
ends its follower of the run; a cancel stops the task, keeps the partial answer and closes
dangling calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability, StreamMode
from opentelemetry import trace

from agentchat.agent.audit.trail import card_shown
from agentchat.agent.chat.turn_text import TurnText
from agentchat.agent.graph.checkpoints import Checkpointer
from agentchat.agent.graph.state import TurnRuntime
from agentchat.agent.graph.taint import own_result
from agentchat.agent.metrics import ACTIVE_TURNS, CARDS, TURNS
from agentchat.agent.storage import approvals as approval_records
from agentchat.agent.storage import confirmations, leases, outbox
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import STORAGE_ERRORS, Db, connection
from agentchat.agent.storage.fencing import CURRENT, RunFence, RunFenced
from agentchat.errors import AgentChatError, ErrorCode

log = logging.getLogger("agentchat.agent.chat.turn_task")
TRACER = trace.get_tracer("agentchat.agent")
END_OF_STREAM: dict[str, Any] = {"type": "__end__"}
# The tools' own events (written with get_stream_writer; the model node's text goes straight
# to the turn's queue, TurnRuntime.text_out), and the updates that carry a card's interrupt.
# Not "messages": that mode is a callback per model token, which the model node's own stream
# makes unnecessary.
STREAM_MODES: list[StreamMode] = ["custom", "updates"]
# A run's checkpoint is saved when it exits: at its end, at a card (an interrupt), at a
# failure or a cancel. "async", LangGraph's default, also saved one before and after every
# step (three checkpoints and two writes for a plain answer instead of one checkpoint): at a
# burst of 200 submits those queued on the pool before the model's first token and again
# before `final` (bench/HISTORY.md, "Checkpoints at a run's exit"). What a run that dies
# mid-way loses is the steps since its turn began or its card was answered: a takeover or
# `retry` runs those again, with the same idempotency keys; a step that planned a write was
# stored before the write ran, and a takeover replays it rather than asking the model
# (agent/graph/plans.py).
DURABILITY: Durability = "exit"


@dataclass
class Turn:
    """One run of the graph for one submit: a first turn, a resume, or a retry."""

    conversation_id: str
    turn_id: str
    tab: str  # the browser tab holding the lease (tab_id on the wire)
    runtime: TurnRuntime
    graph_input: Any
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    text: str = ""
    status: str = "running"
    new_thread: bool = False  # the conversation was created for this turn: no checkpoint yet
    # Set by its run (run_hub.py): raises RunFenced once the run's epoch is not ours. Every
    # record the turn writes, and its checkpoints, are checked by it first.
    guard: Callable[[], Awaitable[None]] | None = None
    # The run's epoch as its side effects check it in PostgreSQL (storage/fencing.py): its
    # ss-tools requests, audit rows and planned steps; filled in by its run.
    fence: RunFence = field(default_factory=RunFence)
    out: TurnText = field(init=False)  # the queue as the turn writes it (coalesced text)

    @property
    def fenced(self) -> bool:
        return self.fence.fenced

    @fenced.setter
    def fenced(self, value: bool) -> None:
        self.fence.fenced = value

    async def owned(self) -> None:
        if self.fenced:
            raise RunFenced(self.turn_id)
        if self.guard is not None:
            await self.guard()

    def __post_init__(self) -> None:
        self.out = TurnText(self.queue)

    def emit(self, event: dict[str, Any]) -> None:
        """To the turn's run (run_hub.py), which reads every event, listened to or not; the
        text gathered before it goes first."""
        self.out.event(event)

    def emit_text(self, event: dict[str, Any]) -> None:
        """The model node's text (TurnRuntime.text_out), coalesced on its way to the run
        (turn_text.py)."""
        self.text += event["token"]
        self.out.text(event["token"])


class TurnRunner:
    def __init__(self, *, graph: CompiledStateGraph[Any, TurnRuntime, Any, Any], pool: Db,
                 lease_s: float, checkpointer: Checkpointer | None = None) -> None:
        self.graph = graph
        self.checkpointer = checkpointer
        self.pool = pool
        self.lease_s = lease_s
        self.active: dict[str, Turn] = {}
        self.background: set[asyncio.Task[None]] = set()
        # Set at shutdown once the live runs were marked lost: the tasks the loop then cancels
        # must not record a user's cancel over RUN_LOST (retry completes those turns).
        self.abandoned = False

    def start(self, turn: Turn) -> Turn:
        self.active[turn.conversation_id] = turn
        turn.runtime = replace(turn.runtime, text_out=turn.emit_text)
        if self.checkpointer is not None:
            if turn.new_thread:
                self.checkpointer.new_thread(turn.conversation_id)
            self.checkpointer.guards[turn.conversation_id] = turn.owned
        turn.task = asyncio.create_task(self._run(turn), name=f"turn-{turn.turn_id}")
        return turn

    async def drain(self, grace_s: float = 30.0) -> None:
        """Let running turns finish at shutdown (they were promised to the user)."""
        tasks = [t.task for t in self.active.values() if t.task]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)

    def _keep(self, task: asyncio.Task[None]) -> None:
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _retry_record(self, turn: Turn, record: Callable[[], Awaitable[None]],
                            attempts: int = 60, pause_s: float = 1.0) -> None:
        for _ in range(attempts):
            await asyncio.sleep(pause_s)
            try:
                await record()
                return
            except Exception:
                continue
        log.error("gave up recording the failed turn %s", turn.turn_id)

    def config(self, conversation_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": conversation_id}}

    async def state(self, conversation_id: str) -> Any:
        """The thread's latest checkpoint (LangGraph's StateSnapshot)."""
        return await self.graph.aget_state(self.config(conversation_id))

    async def _heartbeat(self, turn: Turn) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            with contextlib.suppress(AgentChatError):
                await leases.extend_lease(self.pool, turn.conversation_id, turn.tab,
                                          self.lease_s)

    async def _run(self, turn: Turn) -> None:
        # The turn's side effects, made from this task and the graph's (copies of its
        # context), are fenced by its run (agent/storage/fencing.py).
        CURRENT.set(turn.fence)
        # The root of the turn's trace: graph nodes, policy checks, cards and tool calls nest
        # under it. Ids only; never message text or tokens.
        with TRACER.start_as_current_span("agentchat.turn", attributes={
                "agentchat.turn_id": turn.turn_id,
                "agentchat.conversation_id": turn.conversation_id}):
            await self._run_traced(turn)

    async def _run_traced(self, turn: Turn) -> None:
        beat = asyncio.create_task(self._heartbeat(turn))
        ACTIVE_TURNS.inc()
        try:
            await self._stream(turn)
        except RunFenced:
            turn.fenced = True
            log.warning("turn %s: its run was taken over; it stops here", turn.turn_id)
        except asyncio.CancelledError:
            await self._after_cancel(turn)
            raise
        except AgentChatError as e:
            await self._after_failure(turn, e)
        except STORAGE_ERRORS:  # the checkpointer's own writes meet the outage unwrapped
            await self._after_failure(turn, AgentChatError(
                ErrorCode.STORAGE_UNAVAILABLE, "the database is unreachable; try again shortly"))
        except Exception:  # never leak a stack trace to the client
            log.exception("turn %s failed", turn.turn_id)
            await self._after_failure(turn, AgentChatError(ErrorCode.INTERNAL,
                                                           "internal error"))
        finally:
            ACTIVE_TURNS.dec()
            beat.cancel()
            if self.checkpointer is not None:
                self.checkpointer.thread_done(turn.conversation_id)
                if self.checkpointer.guards.get(turn.conversation_id) == turn.owned:
                    del self.checkpointer.guards[turn.conversation_id]
            if not turn.fenced:
                with contextlib.suppress(Exception):
                    await leases.extend_lease(self.pool, turn.conversation_id, turn.tab,
                                              self.lease_s)
            if self.active.get(turn.conversation_id) is turn:
                del self.active[turn.conversation_id]
            turn.emit(END_OF_STREAM)

    async def _stream(self, turn: Turn) -> None:
        config = self.config(turn.conversation_id)
        card: dict[str, Any] | None = None
        # The run's own `halt` (the tools node sets it in every update), read from the stream:
        # no checkpoint read at the end, and an earlier run's halt cannot end this one.
        halt: dict[str, Any] | None = None
        async for part in self.graph.astream(
            turn.graph_input, config, context=turn.runtime,
            stream_mode=STREAM_MODES, durability=DURABILITY,
        ):
            # With a list of modes each part is (mode, chunk); langgraph types it loosely.
            mode, chunk = cast(tuple[str, Any], part)
            if mode == "custom" and isinstance(chunk, dict):
                if chunk.get("type") == "stream_token":  # text_out unset: the graph's stream
                    turn.emit_text(chunk)
                    continue
                await self._record_tool_event(turn, chunk)
                turn.emit(chunk)
            elif mode == "updates" and "__interrupt__" in chunk:
                if card is None:
                    card = dict(chunk["__interrupt__"][0].value)
            elif mode == "updates" and isinstance(chunk, dict):
                for update in chunk.values():
                    if isinstance(update, dict) and "halt" in update:
                        halt = update["halt"]
        if card is not None:
            # Only now: LangGraph saves the interrupted step's checkpoint when the run's loop
            # exits. Raised from inside the loop, the card could be answered before that
            # checkpoint existed (the soak saw half its answers re-raise the card under load).
            await self._raise_card(turn, card)
            return
        if halt:
            await self._finish(turn, "failed", halt["code"])
            turn.emit({"type": "error", "code": halt["code"], "detail": halt["detail"],
                       "retryable": False})
            return
        message_id = str(uuid.uuid4())
        await self._finish(turn, "completed", answer_id=message_id)
        turn.emit({"type": "final", "message_id": message_id, "content": turn.text})

    async def _raise_card(self, turn: Turn, card: dict[str, Any]) -> None:
        # The text before the card is stored before the card: history hangs a card on the
        # turn's first assistant message stored after it (the answer after the resume).
        await turn.owned()
        if turn.text:
            await turn_records.add_message(self.pool, message_id=str(uuid.uuid4()),
                                           conversation_id=turn.conversation_id,
                                           turn_id=turn.turn_id, role="assistant",
                                           content=turn.text)
        async with connection(self.pool) as conn, conn.transaction():
            stored = await confirmations.add_confirmation(
                conn, confirm_id=card["confirm_id"], conversation_id=turn.conversation_id,
                turn_id=turn.turn_id, call_id=card["call_id"], payload=card,
                expires_at=datetime.fromisoformat(card["expires_at"]))
            if stored:  # showing it is its audit row, in the same transaction
                await card_shown(conn, conversation_id=turn.conversation_id,
                                 turn_id=turn.turn_id, card=card)
                if card.get("approval") and await approval_records.add_approval(
                        conn, approval_id=card["confirm_id"],
                        conversation_id=turn.conversation_id, card=card,
                        rule=card["approval"]["policy_rule"], tab=turn.tab,
                        expires_at=datetime.fromisoformat(card["expires_at"])):
                    # Someone else answers it (docs/protocol.md §11): told from the outbox, never
                    # here.
                    await outbox.enqueue(conn, card["confirm_id"], "approval_requested")
        if stored:
            CARDS.labels("shown").inc()
        await self._finish(turn, "awaiting_confirmation")
        turn.emit(card)

    async def _record_tool_event(self, turn: Turn, event: dict[str, Any]) -> None:
        kind, cid = event.get("type"), str(event.get("call_id"))
        await turn.owned()
        if kind == "tool_start":
            await turn_records.tool_started(self.pool, conversation_id=turn.conversation_id,
                                            turn_id=turn.turn_id, call_id=cid,
                                            tool=str(event["tool"]), tool_input=event["input"])
        elif kind == "tool_end":
            await turn_records.tool_finished(self.pool, conversation_id=turn.conversation_id,
                                             call_id=cid, outcome="ok",
                                             output=event.get("output"))
        elif kind == "tool_error":
            await turn_records.tool_finished(self.pool, conversation_id=turn.conversation_id,
                                             call_id=cid, outcome="error",
                                             error=event.get("error"),
                                             attempts=int(event.get("retry_count", 1)))
        elif kind == "tool_timeout":
            await turn_records.tool_finished(self.pool, conversation_id=turn.conversation_id,
                                             call_id=cid, outcome="timeout", error="timeout")

    async def _finish(self, turn: Turn, status: str, error_code: str | None = None, *,
                      answer_id: str | None = None, partial: bool = False) -> None:
        """The turn's end, stored in one statement: its answer so far as message `answer_id`
        (when given), its status, the conversation's activity."""
        await turn.owned()
        turn.status = status
        TURNS.labels(status, error_code or "").inc()
        await turn_records.end_turn(self.pool, turn_id=turn.turn_id,
                                    conversation_id=turn.conversation_id, status=status,
                                    error_code=error_code, message_id=answer_id,
                                    content=turn.text, partial=partial)

    async def close_dangling(self, conversation_id: str, reason: str, outcome: str,
                             partial_text: str = "") -> None:
        """Leave no call unanswered, in the checkpoint and in the records: every tool call of
        the thread's last model message without a ToolMessage gets one (`reason`, status
        error), after it the partial answer if there is one, and every call still `running`
        in `tool_calls` gets `outcome`, so the model never sees a call without a result. The
        one repair for a cancelled or failed turn, a run that died mid-step (turn_starts.py) and
        a card a new message denies (card_answers.py)."""
        messages: list[BaseMessage] = (await self.state(conversation_id)).values.get(
            "messages", [])
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        patch: list[BaseMessage] = [
            own_result(reason, tool_call_id=c["id"] or "", name=c["name"])
            for c in (last_ai.tool_calls if last_ai else []) if c["id"] not in answered]
        if partial_text:
            patch.append(AIMessage(content=partial_text))
        if patch:
            await self.graph.aupdate_state(self.config(conversation_id),
                                           {"messages": patch}, as_node="tools")
        await turn_records.close_dangling_calls(self.pool, conversation_id, outcome)

    async def _after_cancel(self, turn: Turn) -> None:
        if self.abandoned or turn.fenced:
            return
        # Shielded: the task is being cancelled, but the records must still be written.
        async def record() -> None:
            await self.close_dangling(turn.conversation_id, "cancelled by the user",
                                      "cancelled", turn.text)
            await self._finish(turn, "partial", "CANCELLED", answer_id=str(uuid.uuid4()),
                               partial=True)

        try:
            await asyncio.shield(record())
        except Exception:
            log.exception("recording the cancelled turn %s failed", turn.turn_id)

    async def _after_failure(self, turn: Turn, err: AgentChatError) -> None:
        if turn.fenced:
            return
        message_id = str(uuid.uuid4())  # one id, so a retried record adds the message once

        async def record() -> None:
            await self.close_dangling(turn.conversation_id, f"not completed: {err.code}",
                                      "error")
            await self._finish(turn, "failed", str(err.code),
                               answer_id=message_id if turn.text else None, partial=True)

        try:
            await record()
        except Exception:
            # Usually the database is down (that may be the failure itself): record it once
            # it is back, in the background, so the user gets the error now.
            log.warning("recording the failed turn %s failed; retrying", turn.turn_id)
            self._keep(asyncio.create_task(self._retry_record(turn, record)))
        turn.emit({"type": "error", "code": str(err.code), "detail": err.detail,
                   "retryable": err.retryable})
