"""The chat domain's one door (docs/architecture.md, "One turn, through the modules"):
`Chat.submit(request, principal) -> Run` and `Chat.join(request, principal)`. The Gradio adapter
(agent/gradio/chat_api.py) calls it with a parsed, authenticated request; whatever an adapter is,
the rules are here:

    admission       the user's limits (user_limits.py: runs, streams, submits a minute) and
                    the replica's (run_hub.py: draining, its cap), before anything is stored
    attachments     the caller's own uploads read off the event loop (attachments.py), before
                    anything is stored: a refused file leaves nothing behind
    the kind        a message (turn_starts.py: one statement, or one transaction on an
                    existing conversation), a card's answer (card_answers.py, in the
                    transaction that opened the conversation), a retry
    the lease       the tab's (docs/protocol.md §4), taken in that same statement; the same
                    tab's run still stopping is waited for, another tab's is BUSY
    the run         run_hub.py: the turn's events, numbered, kept and stored; a join follows
                    one from any replica (join.py)

It holds what the REST adapter reads besides: `conversations` (conversations.py: the list,
archive and restore, history, a tab's state), `audit_log` (audit_log.py), the model's status
and the debug view of a message's tools.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from langgraph.types import Command
from opentelemetry import trace

from agentchat.agent.chat import forks
from agentchat.agent.chat.attachments import file_text
from agentchat.agent.chat.audit_log import AuditLog
from agentchat.agent.chat.card_answers import Answered, CardAnswers
from agentchat.agent.chat.conversations import Conversations
from agentchat.agent.chat.join import RunListener, join
from agentchat.agent.chat.live_run import Run
from agentchat.agent.chat.request import FORKS, ChatRequest, UIContext
from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.chat.turn_starts import TurnStarts
from agentchat.agent.chat.turn_task import Turn, TurnRunner
from agentchat.agent.chat.upload_book import UploadBook
from agentchat.agent.chat.user_limits import UserLimits
from agentchat.agent.graph.model import LlmStatusProbe
from agentchat.agent.selection.turn_tools import TurnTools
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import branches, runs, submits
from agentchat.agent.storage.db import Db, Row, connection
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal
from agentchat.words import as_lang

TRACER = trace.get_tracer("agentchat.agent")


class Chat:
    def __init__(self, *, settings: AgentSettings, pool: Db, runner: TurnRunner, hub: RunHub,
                 listener: RunListener, limits: UserLimits, starts: TurnStarts,
                 answers: CardAnswers, conversations: Conversations, audit_log: AuditLog,
                 llm_status: LlmStatusProbe, uploads: UploadBook) -> None:
        self.settings = settings
        self.uploads = uploads
        self.pool = pool
        self.runner = runner
        self.hub = hub
        self.listener = listener
        self.limits = limits
        self.starts = starts
        self.answers = answers
        self.conversations = conversations
        self.audit_log = audit_log
        self._llm_status = llm_status

    @property
    def draining(self) -> bool:
        """SIGTERM: this replica takes no new runs; live ones go on."""
        return self.hub.draining

    async def llm_status(self) -> dict[str, Any]:
        """The model endpoint's state, probed at most once a cache interval."""
        return await self._llm_status.get()

    async def tool_selection(self, text: str, uicontext: str | None) -> TurnTools:
        """Which tools a message would get and why; `uicontext` as JSON (INVALID_REQUEST
        when it is not a UIContext)."""
        try:
            ctx = UIContext.model_validate_json(uicontext).model_dump() if uicontext else None
        except ValueError:
            raise AgentChatError(ErrorCode.INVALID_REQUEST, "bad UIContext") from None
        # A worker thread, as for a turn: a 16 KB query's keywords and fallback take tens of ms.
        return await asyncio.to_thread(self.starts.tools.choose, text, ctx)

    async def submit(self, req: ChatRequest, principal: Principal) -> Run:
        """Start the run this submit asks for (`req.user_jwt`: the verified token;
        `req.tab_id`: the tab). Its events, any early ones first, come from `Run.follow`;
        `Run.stop()` cancels it."""
        slot = self.limits.admit(principal.sub)
        try:
            self.hub.admit()
            if req.files and req.action in (None, "edit"):
                req.attached = await file_text(self.uploads, self.settings, req.files,
                                               principal.sub)
            turn, early = await self._start(req, principal)
            slot.hold(turn.task)  # the run slot is freed when the turn's task ends
            return self.hub.start(turn, req.action or "message", early)
        finally:
            slot.release_unless_held()  # the submit failed before a turn took it

    async def join(self, req: ChatRequest, principal: Principal) -> AsyncIterator[dict[str, Any]]:
        """`action: "join"`: a run's events after `last_seq`, then live; never starts or
        changes a run, takes no lease; one of the user's streams while it follows."""
        assert req.conversation_id is not None
        slot = self.limits.admit_join(principal.sub)
        try:
            async for event in join(self.hub, self.listener, self.pool, owner=principal.sub,
                                    conversation_id=req.conversation_id, run_id=req.run_id,
                                    last_seq=req.last_seq):
                yield event
        finally:
            slot.release_unless_held()

    async def stop(self, *, owner: str, conversation_id: str, run_id: str, tab: str) -> str:
        """Stop by run_id (docs/protocol.md §4): the owner's run (another user's is NOT_FOUND,
        in the SQL), started by this tab, stopped as a Gradio cancel stops it (the partial
        answer stored); its status then. A run that already ended answers its status and
        nothing changes. A run on another replica is marked in `runs`; that replica stops it
        at its next heartbeat (`run_heartbeat_s`), which is waited for up to the heartbeat and
        `stop_wait_s`; `stopping` if it has not ended by then."""
        row = await runs.find_run(self.pool, owner=owner, conversation_id=conversation_id,
                                  run_id=run_id, lost_s=self.settings.tuning.run_lost_s)
        if row is None:
            raise AgentChatError(ErrorCode.NOT_FOUND, "no such run")
        if row["tab_id"] != tab:
            raise AgentChatError(ErrorCode.CONVERSATION_BUSY,
                                 "another tab started this run; stop it there")
        if row["status"] != "running":
            return str(row["status"])
        live = self.hub.live.get(run_id)
        if live is not None and self.hub.stop(run_id):
            turn = self.runner.active.get(conversation_id)
            if turn is not None and turn.task is not None:
                await asyncio.wait([turn.task], timeout=self.settings.tuning.stop_wait_s)
            return live.status if live.done else "cancelled"
        if not await runs.request_stop(self.pool, owner=owner, conversation_id=conversation_id,
                                       run_id=run_id, tab=tab):
            return await self._status_of(owner, conversation_id, run_id)
        loop = asyncio.get_running_loop()
        tuning = self.settings.tuning
        deadline = loop.time() + tuning.run_heartbeat_s + tuning.stop_wait_s
        while loop.time() < deadline:
            status = await self._status_of(owner, conversation_id, run_id)
            if status != "running":
                return status
            await asyncio.sleep(0.2)
        return "stopping"

    async def _status_of(self, owner: str, conversation_id: str, run_id: str) -> str:
        row = await runs.find_run(self.pool, owner=owner, conversation_id=conversation_id,
                                  run_id=run_id, lost_s=self.settings.tuning.run_lost_s)
        return str(row["status"]) if row is not None else "lost"

    # -- the kinds of submit ----------------------------------------------------------------------

    async def _start(self, req: ChatRequest, principal: Principal
                     ) -> tuple[Turn, list[dict[str, Any]]]:
        tab = str(req.tab_id)
        if req.conversation_id is not None:
            await self._settle_local(req.conversation_id, tab)
        if req.action in FORKS:
            return await self._fork(req, principal, tab)
        if req.action is None:
            early: list[dict[str, Any]] = []

            async def settle(opened: submits.Opened) -> bool:
                if opened.elsewhere:
                    await self._settle_elsewhere(str(req.conversation_id), opened.elsewhere,
                                                 tab)
                elif opened.pending is not None:
                    early.extend(await self.answers.deny_pending(
                        str(req.conversation_id), principal, tab))
                elif opened.unfinished:
                    assert opened.last is not None
                    await self.starts.settle_orphan(str(req.conversation_id), opened.last)
                    return True
                return False

            return await self.starts.message(req, principal, tab, settle), early
        return await self._act(req, principal, tab)

    async def _fork(self, req: ChatRequest, principal: Principal, tab: str
                    ) -> tuple[Turn, list[dict[str, Any]]]:
        """An edit or a regenerate (docs/protocol.md §4, "Branches"): like a message, except that a
        pending card is not denied for it but refuses it (the person answers the card first)."""
        cid = str(req.conversation_id)

        async def settle(opened: submits.Opened) -> bool:
            if opened.elsewhere:
                await self._settle_elsewhere(cid, opened.elsewhere, tab)
            elif opened.pending is not None and not opened.pending["expired"]:
                err = AgentChatError(ErrorCode.CONVERSATION_BUSY,
                                     "a card is waiting for an answer: confirm or deny it first")
                err.lang = as_lang(((opened.last or {}).get("plan") or {}).get("lang"))
                raise err
            elif opened.pending is not None:
                await self.answers.deny_pending(cid, principal, tab)
            elif opened.unfinished:
                assert opened.last is not None
                await self.starts.settle_orphan(cid, opened.last)
                return True
            return False

        turn, forked = await self.starts.fork(req, principal, tab, settle)
        return turn, [forked]

    async def switch_branch(self, *, owner: str, conversation_id: str, message_id: str,
                            tab: str) -> str:
        """`POST …/branch` (docs/protocol.md §4, "Branches"): the branch through `message_id`
        becomes the active one (its leaf: the newest descendants); the next message continues it.
        Refused like a fork while a card waits or a run is live; takes the tab's lease. Returns the
        leaf."""
        await self._settle_local(conversation_id, tab)
        async with submits.open_for_action(
                self.pool, conversation_id=conversation_id, owner=owner, tab=tab,
                lease_s=self.settings.tuning.lease_s, replica=self.hub.replica,
                lost_s=self.settings.tuning.run_lost_s) as action:
            opened = action.opened
            if opened.pending is not None and not opened.pending["expired"]:
                raise AgentChatError(ErrorCode.CONVERSATION_BUSY,
                                     "a card is waiting for an answer: confirm or deny it first")
            if opened.elsewhere:
                raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")
            leaf = await branches.branch_through(action.conn, conversation_id, message_id)
            users = [m["id"] for m in await branches.chain(action.conn, conversation_id, leaf)
                     if m["role"] == "user"]
            await forks.show_branch(self.runner.graph, self.runner.config(conversation_id),
                                    users[-1] if users else None)
            action.then(branches.SET_LEAF, {"id": conversation_id, "owner": owner,
                                            "leaf": leaf})
        return leaf

    async def _act(self, req: ChatRequest, principal: Principal, tab: str
                   ) -> tuple[Turn, list[dict[str, Any]]]:
        """A card's answer or a retry, on the conversation opened under its lock."""
        if req.conversation_id is None:
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION
                                 if req.action != "retry" else ErrorCode.NOT_FOUND,
                                 "no conversation was given")
        cid, token = req.conversation_id, str(req.user_jwt)
        answering = req.action in ("confirm", "deny")
        for _ in range(4):
            last: Row | None = None
            answer: tuple[Row, Answered] | None = None
            try:
                async with submits.open_for_action(
                        self.pool, conversation_id=cid, owner=principal.sub, tab=tab,
                        lease_s=self.settings.tuning.lease_s, replica=self.hub.replica,
                        lost_s=self.settings.tuning.run_lost_s) as action:
                    opened = action.opened
                    last = opened.last
                    if answering and not opened.elsewhere:
                        with TRACER.start_as_current_span("agentchat.card.answer", attributes={
                                "agentchat.conversation_id": cid,
                                "agentchat.action": str(req.action)}):
                            answered = await self.answers.answer(
                                action, kind=str(req.action), confirm_id=req.confirm_id,
                                principal=principal, token=token, tab=tab,
                                approved=req.approved, approve=req.approve)
                        assert opened.pending is not None
                        answer = (opened.pending, answered)
            except AgentChatError as e:
                e.lang = as_lang(((last or {}).get("plan") or {}).get("lang"))
                raise
            if opened.elsewhere:
                await self._settle_elsewhere(cid, opened.elsewhere, tab)
                continue
            if answer is not None:
                # Committed: the turn goes on from its card with the answer.
                pending, answered = answer
                graph_input: Command[Any] = Command(
                    resume=answered.resume(pending["confirm_id"]))
                early = [answered.event(pending["confirm_id"])]
                turn_id = str(pending["turn_id"] or uuid.uuid4())
                # An approval's resume runs under the approver's token: never kept for a
                # takeover (docs/protocol.md §11).
                return self.starts.resume(cid, tab, token, last, turn_id, graph_input,
                                          keep_token=req.approved is None), early
            early = (await self.answers.deny_pending(cid, principal, tab)
                     if opened.pending is not None else [])
            return await self.starts.retry(token, cid, tab, last), early
        raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")

    # -- what stands in the way -------------------------------------------------------------------

    async def _settle_local(self, conversation_id: str, tab: str) -> None:
        """A turn of this conversation running here. One that has sent its last event (final,
        card, error) may still be writing its records: the next submit is not busy. The same
        tab's (Stop, then send at once) is waited for up to `stop_wait_s`; another tab's is
        BUSY at once."""
        running = self.runner.active.get(conversation_id)
        if running is None or running.status != "running":
            return
        if running.tab == tab and running.task is not None:
            await asyncio.wait([running.task], timeout=self.settings.tuning.stop_wait_s)
            if running.task.done() or running.status != "running":
                return
        raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")

    async def _settle_elsewhere(self, conversation_id: str, live: list[Row], tab: str) -> None:
        """A run of this conversation live on another replica (the same tab reconnected to
        another pod): waited for like a local one; a dead replica's run is marked lost."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.tuning.stop_wait_s
        while live:
            if stale := [str(r["id"]) for r in live if r["stale"]]:
                # A new message from the run's own tab supersedes it: not taken over.
                await self.hub.mark_lost(stale)
            elif any(r["tab_id"] != tab for r in live) or loop.time() >= deadline:
                raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")
            else:
                await asyncio.sleep(0.1)
            async with connection(self.pool) as conn:
                live = await runs.live_elsewhere(conn, conversation_id, self.hub.replica,
                                                 self.settings.tuning.run_lost_s)
