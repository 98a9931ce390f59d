"""What a `/chat` submit does (docs/protocol.md §1–§4): which conversation, the multi-tab lease, and
which kind of submit it is (a message, a card's answer, a retry), started as a turn.

`stream.py` turns what the turn emits into the events the client sees. A card's answer is
the audit trail's answer row (and the re-check's decision row), in the transaction that
resolves the card; the span `agentchat.card.answer` and CARDS / CARD_ANSWER count it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langgraph.types import Command
from opentelemetry import trace

from agentchat.agent.audit.store import Entry
from agentchat.agent.audit.trail import AuditTrail, decision_detail
from agentchat.agent.chat.inputs import ChatRequest
from agentchat.agent.chat.join import RunListener, join
from agentchat.agent.chat.limits import UserLimits
from agentchat.agent.chat.runs import Run, RunHub
from agentchat.agent.chat.turns import Turn, TurnRunner
from agentchat.agent.chat.uploads import OWNERS
from agentchat.agent.graph.builder import TurnRuntime
from agentchat.agent.graph.offline.rules import TurnContext
from agentchat.agent.graph.policy_client import PolicyClient
from agentchat.agent.graph.taint import context_taint, user_message
from agentchat.agent.metrics import CARD_ANSWER, CARDS
from agentchat.agent.selection.turn_tools import TurnToolChooser
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import confirmations, conversations, leases, runs
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db, connection, not_found
from agentchat.catalog_source import CatalogSource
from agentchat.db import conversation_lock
from agentchat.errors import AgentChatError, ErrorCode, TokenError
from agentchat.identity import Principal, TokenVerifier
from agentchat.words import Lang, as_lang, turn_language

TRACER = trace.get_tracer("agentchat.agent")


class ChatService:
    def __init__(self, *, settings: AgentSettings, pool: Db, runner: TurnRunner,
                 verifier: TokenVerifier, tools: TurnToolChooser, policy: PolicyClient,
                 catalogs: CatalogSource, limits: UserLimits, hub: RunHub,
                 listener: RunListener, audit: AuditTrail | None = None) -> None:
        self.settings = settings
        self.audit = audit
        self.hub = hub
        self.listener = listener
        self.limits = limits
        self.policy = policy
        self.catalogs = catalogs
        self.pool = pool
        self.runner = runner
        self.verifier = verifier
        self.tools = tools

    # -- who and which conversation -------------------------------------------------------------

    def authenticate(self, req: ChatRequest, header_token: str | None) -> tuple[Principal, str]:
        if header_token and req.user_jwt and header_token != req.user_jwt:
            raise TokenError("mismatch", "the forwarded token and user_jwt differ")
        token = header_token or req.user_jwt
        principal = self.verifier.verify(token)
        if req.user_id is not None and req.user_id != principal.sub:
            raise TokenError("user_mismatch", "user_id is not the token's subject")
        assert token is not None
        return principal, token

    async def open_conversation(self, req: ChatRequest, principal: Principal) -> str:
        """The owner's conversation a submit names (a message without one starts a new
        conversation: `start_conversation`)."""
        if req.conversation_id is None:
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION
                                 if req.action != "retry" else ErrorCode.NOT_FOUND,
                                 "no conversation was given")
        conv = await conversations.get_conversation(self.pool, owner=principal.sub,
                                                    conversation_id=req.conversation_id)
        if conv["is_archived"]:
            raise AgentChatError(ErrorCode.CONVERSATION_ARCHIVED,
                                 "the conversation is archived; restore it first")
        return str(conv["id"])

    async def conversation_language(self, conversation_id: str) -> Lang:
        """The language of the conversation's last turn: a resume (`__resume__`) has none."""
        last = await turn_records.last_turn(self.pool, conversation_id)
        return as_lang(((last or {}).get("plan") or {}).get("lang"))

    async def take_lease(self, conversation_id: str, tab: str) -> None:
        """The multi-tab gate (docs/protocol.md §4): the lease belongs to the user's tab. Taken
        under the conversation's lock, so the pruner (which checks leases under the same lock)
        never deletes a thread being used. The same tab's previous run, still stopping (Stop,
        then send at once), is waited for up to `stop_wait_s`; another tab is BUSY at once."""
        await self._settle_local(conversation_id, tab)
        async with connection(self.pool) as conn, conversation_lock(conn, conversation_id):
            try:
                taken = await leases.take_lease(conn, conversation_id, tab,
                                                self.settings.lease_s)
            except psycopg.errors.ForeignKeyViolation:
                raise not_found() from None
            if not taken:
                raise AgentChatError(ErrorCode.CONVERSATION_BUSY,
                                     "the conversation is open in another tab")
            elsewhere = await runs.live_elsewhere(conn, conversation_id, self.hub.replica,
                                                  self.settings.run_lost_s)
        if elsewhere:
            await self._settle_elsewhere(conversation_id, tab, elsewhere)

    async def _settle_local(self, conversation_id: str, tab: str) -> None:
        # A turn that has sent its last event (final, card, error) may still be writing its
        # records: the next submit is not busy (a follow-up right after the final got BUSY).
        running = self.runner.active.get(conversation_id)
        if running is None or running.status != "running":
            return
        if running.session_id == tab and running.task is not None:
            await asyncio.wait([running.task], timeout=self.settings.stop_wait_s)
            if running.task.done() or running.status != "running":
                return
        raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")

    async def _settle_elsewhere(self, conversation_id: str, tab: str,
                                live: list[dict[str, Any]]) -> None:
        """A run of this conversation live on another replica (the same tab reconnected to
        another pod): wait for it like a local one; a dead replica's run is marked lost."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.stop_wait_s
        while live:
            if any(r["stale"] for r in live):
                await self.hub.mark_lost()
            elif any(r["tab_id"] != tab for r in live) or loop.time() >= deadline:
                raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")
            else:
                await asyncio.sleep(0.1)
            async with connection(self.pool) as conn:
                live = await runs.live_elsewhere(conn, conversation_id, self.hub.replica,
                                                 self.settings.run_lost_s)

    def join(self, req: ChatRequest, principal: Principal) -> AsyncIterator[dict[str, Any]]:
        """`action: "join"`: never starts or changes a run, takes no lease."""
        assert req.conversation_id is not None
        return join(self.hub, self.listener, self.pool, owner=principal.sub,
                    conversation_id=req.conversation_id, run_id=req.run_id,
                    last_seq=req.last_seq)

    # -- the kinds of submit --------------------------------------------------------------------

    async def submit(self, req: ChatRequest, principal: Principal, token: str,
                     conversation_id: str, session: str) -> tuple[Turn, Run]:
        """Start the turn for this submit, as a run (its events, any early ones first)."""
        if req.action in ("confirm", "deny"):
            with TRACER.start_as_current_span("agentchat.card.answer", attributes={
                    "agentchat.conversation_id": conversation_id,
                    "agentchat.action": str(req.action)}):
                turn, early = await self._answer(req, principal, token, conversation_id,
                                                 session)
        else:
            early = await self._deny_pending(conversation_id, principal, session)
            if req.action == "retry":
                turn = await self._retry(token, conversation_id, session)
            else:
                turn = await self._new_turn(req, token, conversation_id, session)
        return turn, self.hub.start(turn, req.action or "message", early)

    async def _runtime(self, conversation_id: str, turn_id: str, token: str, text: str,
                       env_id: str | None, uicontext: dict[str, Any] | None) -> TurnRuntime:
        """A new plan for a turn: the tools offered and the prefetch (a new turn, a retry)."""
        # Selection is a few ms of CPU (embeddings): keep it off the event loop.
        plan = await asyncio.to_thread(self.tools.choose, text, uicontext, env_id)
        return TurnRuntime(conversation_id=conversation_id, user_jwt=token, tools=plan.tools,
                           turn=TurnContext(env_id=env_id, uicontext=uicontext),
                           prefetch=plan.prefetch,
                           confirmation_ttl_s=self.settings.confirmation_ttl_s,
                           turn_id=turn_id, lang=turn_language(text))

    def _resumed_runtime(self, conversation_id: str, token: str,
                         last: dict[str, Any] | None) -> TurnRuntime:
        """A resume (a card's answer, an orphan) gates against the set the turn offered, with
        its UIContext and environment; no new plan and no second prefetch."""
        plan = (last or {}).get("plan") or {}
        return TurnRuntime(conversation_id=conversation_id, user_jwt=token,
                           tools=list(plan.get("tools") or []),
                           turn=TurnContext(env_id=plan.get("env_id"),
                                            uicontext=plan.get("uicontext")),
                           confirmation_ttl_s=self.settings.confirmation_ttl_s,
                           turn_id=str((last or {}).get("id") or ""),
                           lang="en" if plan.get("lang") == "en" else "ru")

    @staticmethod
    def _plan_record(runtime: TurnRuntime) -> dict[str, Any]:
        return {"tools": runtime.tools, "env_id": runtime.turn.env_id,
                "uicontext": runtime.turn.uicontext, "lang": runtime.lang}

    async def _new_turn(self, req: ChatRequest, token: str, conversation_id: str,
                        session: str) -> Turn:
        turn_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
        text = f"{req.text}\n\n{req.attached}".strip() if req.attached else req.text
        OWNERS.used_in(conversation_id, (f["key"] for f in req.files))  # deleted with it
        await self._close_orphan(conversation_id)
        runtime = await self._runtime(conversation_id, turn_id, token, req.text, req.env_id,
                                      req.uicontext)
        await turn_records.start_turn(self.pool, turn_id, conversation_id,
                                      self._plan_record(runtime))
        await turn_records.add_message(self.pool, message_id=message_id,
                                       conversation_id=conversation_id, turn_id=turn_id,
                                       role="user", content=text)
        await conversations.set_title_if_empty(self.pool, conversation_id, req.text)
        graph_input = {"messages": [user_message(text, message_id=message_id,
                                                 with_files=bool(req.attached))]}
        return self.runner.start(Turn(conversation_id, turn_id, session, runtime, graph_input))

    async def start_conversation(self, req: ChatRequest, principal: Principal, token: str,
                                 session: str) -> tuple[Turn, Run]:
        """A message without a conversation id: the turn's tools are chosen first, then the
        conversation, its lease, the turn and the user message are stored in one statement
        (`turns.start_conversation`); what `open_conversation`, `take_lease` and `submit` check
        for an existing conversation (another tab, a run elsewhere, a pending card, an orphan,
        no title) cannot apply to a conversation that did not exist."""
        conversation_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
        message_id = str(uuid.uuid4())
        text = f"{req.text}\n\n{req.attached}".strip() if req.attached else req.text
        OWNERS.used_in(conversation_id, (f["key"] for f in req.files))  # deleted with it
        runtime = await self._runtime(conversation_id, turn_id, token, req.text, req.env_id,
                                      req.uicontext)
        await turn_records.start_conversation(
            self.pool, conversation_id=conversation_id, owner=principal.sub,
            title=conversations.title_from(req.text), session=session,
            lease_s=self.settings.lease_s, turn_id=turn_id, plan=self._plan_record(runtime),
            message_id=message_id, content=text)
        graph_input = {"messages": [user_message(text, message_id=message_id,
                                                 with_files=bool(req.attached))]}
        turn = self.runner.start(Turn(conversation_id, turn_id, session, runtime, graph_input,
                                      new_thread=True))
        return turn, self.hub.start(turn, "message", [])

    async def _close_orphan(self, conversation_id: str) -> None:
        """Before a new message: a run that died mid-step (see recovery.py) gets its dangling
        calls answered, so the model never sees a call without a result."""
        last = await turn_records.last_turn(self.pool, conversation_id)
        if last is None or last["status"] not in ("running", "failed"):
            return
        await self.runner.close_dangling(
            conversation_id, "interrupted: the agent stopped before this call finished",
            "error")
        if last["status"] == "running":  # we hold the lease: nobody is running it
            await turn_records.finish_turn(self.pool, last["id"], "failed",
                                           str(ErrorCode.INTERNAL))

    async def _resume_orphan(self, state: Any, last: dict[str, Any], token: str,
                             conversation_id: str, session: str) -> Turn | None:
        """`retry` of a run that died mid-step: go on from its last checkpoint. Tool calls keep
        their idempotency keys, so a confirmed call that already ran is replayed, not re-run."""
        if not state.next:
            return None
        graph_input: Any = None
        interrupts = [i for t in state.tasks for i in t.interrupts]
        if interrupts:  # died between a card's answer and the confirm step: answer it again
            card = interrupts[0].value if isinstance(interrupts[0].value, dict) else {}
            row = await confirmations.get_confirmation(self.pool, str(card.get("confirm_id")))
            if row is None or row["status"] == "pending":
                return None
            graph_input = Command(resume={"result": row["status"],
                                          "confirm_id": row["confirm_id"]})
        await turn_records.resume_turn(self.pool, last["id"])
        runtime = self._resumed_runtime(conversation_id, token, last)
        return self.runner.start(Turn(conversation_id, last["id"], session, runtime,
                                      graph_input))

    async def _retry(self, token: str, conversation_id: str, session: str) -> Turn:
        last = await turn_records.last_turn(self.pool, conversation_id)
        if last is None:
            raise AgentChatError(ErrorCode.NOT_FOUND, "there is no turn to retry")
        state = await self.runner.state(conversation_id)
        if last["status"] in ("running", "failed"):
            resumed = await self._resume_orphan(state, last, token, conversation_id, session)
            if resumed is not None:
                return resumed
        messages: list[BaseMessage] = state.values.get("messages", [])
        ids = [m.id for m in messages]
        human_id = last["user_message_id"]
        after = ids[ids.index(human_id) + 1:] if human_id in ids else []
        turn_id = str(uuid.uuid4())
        plan = last.get("plan") or {}
        runtime = await self._runtime(conversation_id, turn_id, token, last["user_text"],
                                      plan.get("env_id"), plan.get("uicontext"))
        await turn_records.start_turn(self.pool, turn_id, conversation_id,
                                      self._plan_record(runtime))
        # Re-run from the turn's user message: drop what followed it, keep the message itself
        # (and its mark: file text stays file text, agent/graph/taint.py).
        human = next((m for m in messages if m.id == human_id), None)
        graph_input = {"messages": [*(RemoveMessage(id=i) for i in after if i),
                                    HumanMessage(content=last["user_text"], id=human_id,
                                                 additional_kwargs=dict(
                                                     human.additional_kwargs if human else {}))]}
        return self.runner.start(Turn(conversation_id, turn_id, session, runtime, graph_input))

    async def _deny_pending(self, conversation_id: str, principal: Principal,
                            session: str) -> list[dict[str, Any]]:
        """A new message (or a retry) over a pending card resolves the card as denied."""
        async with connection(self.pool) as conn, conversation_lock(conn, conversation_id):
            pending = await confirmations.pending_confirmation(conn, conversation_id)
            if pending is None:
                return []
            with TRACER.start_as_current_span("agentchat.card.answer", attributes={
                    "agentchat.conversation_id": conversation_id,
                    "agentchat.action": "new_message"}):
                async with conn.transaction():
                    if not await confirmations.resolve_confirmation(
                            conn, pending["confirm_id"], "denied"):
                        return []
                    await self._audit_answer(conn, pending, principal, session,
                                             "new_message", "denied", None)
                _count_answer(pending, "denied")
        await self.runner.close_dangling(conversation_id, "not run: the user denied it",
                                         "denied")
        if pending["turn_id"]:
            await turn_records.finish_turn(self.pool, pending["turn_id"], "completed")
        return [{"type": "confirm_resolved", "confirm_id": pending["confirm_id"],
                 "result": "denied"}]

    async def _audit_answer(self, conn: psycopg.AsyncConnection[Any], pending: dict[str, Any],
                            principal: Principal, session: str, action: str, result: str,
                            recheck: dict[str, Any] | None) -> None:
        """The answer row (after the re-check's decision row), and why the call will not run
        unless confirmed; in the caller's transaction, so the card and its answer agree."""
        if self.audit is None:
            return
        ref = await self.audit.record_of(pending["conversation_id"], pending["call_id"], conn)
        if ref is None:  # not an audited call
            return
        card = pending["payload"] or {}
        entries: list[Entry] = []
        if recheck is not None and recheck.get("decision_id"):
            entries.append(ref.entry("decision", decision_detail(
                recheck, kind="recheck", taint=recheck.get("untrusted_source"))))
        entries.append(ref.entry("answer", {
            "confirm_id": pending["confirm_id"], "by": principal.sub,
            "session": self.audit.session_ref(session),
            "action": action, "result": result}))
        if result != "confirmed":
            if result == "expired":
                reason = "expired"
            elif not card.get("permission_granted", True):
                reason = "permission_denied"
            else:
                reason = "revoked" if recheck is not None else "denied"
            entries.append(ref.entry("not_run", {"reason": reason, "detail": action},
                                     once=True))
        await self.audit.append(entries, conn)

    async def _answer(self, req: ChatRequest, principal: Principal, token: str,
                      conversation_id: str, session: str) -> tuple[Turn, list[dict[str, Any]]]:
        # Answers are serialized per conversation: exactly one of two racing confirms wins.
        async with connection(self.pool) as conn, conversation_lock(conn, conversation_id):
            pending = await confirmations.pending_confirmation(conn, conversation_id)
            if pending is None:
                raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                     "there is no pending confirmation")
            if req.confirm_id is not None and req.confirm_id != pending["confirm_id"]:
                raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                     "that confirmation is no longer pending")
            card = pending["payload"]
            recheck: dict[str, Any] | None = None
            if pending["expired"]:
                result = "expired"
            elif req.action == "confirm" and not card.get("permission_granted", True):
                raise AgentChatError(ErrorCode.FORBIDDEN,
                                     "this action is not permitted for you; close the card")
            elif req.action == "confirm":
                # The card was decided minutes ago: ask again with the token of now, so roles
                # revoked meanwhile run nothing. POLICY_UNAVAILABLE leaves the card pending.
                recheck = await self._recheck(card, token, conversation_id)
                result = "denied" if recheck["decision"] == "deny" else "confirmed"
            else:
                result = "denied"
            async with conn.transaction():
                if not await confirmations.resolve_confirmation(conn, pending["confirm_id"],
                                                                result):
                    raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                         "the confirmation was already answered")
                await self._audit_answer(conn, pending, principal, session,
                                         str(req.action), result, recheck)
            _count_answer(pending, result)
        last = await turn_records.last_turn(self.pool, conversation_id)
        runtime = self._resumed_runtime(conversation_id, token, last)
        turn_id = pending["turn_id"] or str(uuid.uuid4())
        if pending["turn_id"]:
            await turn_records.resume_turn(self.pool, turn_id)
        graph_input: Command[Any] = Command(resume={
            "result": result, "confirm_id": pending["confirm_id"], "recheck": recheck})
        turn = self.runner.start(Turn(conversation_id, turn_id, session, runtime, graph_input))
        return turn, [{"type": "confirm_resolved", "confirm_id": pending["confirm_id"],
                       "result": result}]


    async def _recheck(self, card: dict[str, Any], token: str,
                       conversation_id: str) -> dict[str, Any]:
        """The sidecar's decision now on the card's call (same tool, arguments, context)."""
        catalog = self.catalogs.current()  # the revision of now, as the check's token is
        tool = catalog.get(str(card.get("tool_name")))
        args = card.get("tool_args") or {}
        if tool is None:
            return {"decision": "deny", "required_role": None, "alternatives": []}
        state = await self.runner.state(conversation_id)
        last = await turn_records.last_turn(self.pool, conversation_id)
        taint = context_taint(state.values.get("messages", []),
                              ((last or {}).get("plan") or {}).get("uicontext"))
        decision = await self.policy.check_call(user_jwt=token, tool=tool, arguments=args,
                                                untrusted=taint is not None,
                                                catalog_revision=catalog.revision)
        return {**decision, "untrusted_source": taint}


def _count_answer(pending: dict[str, Any], result: str) -> None:
    """CARDS by result and the time the card waited, also on the answer's span (the current
    one: `agentchat.card.answer`)."""
    CARDS.labels(result).inc()
    created = pending.get("created_at")
    if isinstance(created, datetime):
        waited = max(0.0, (datetime.now(UTC) - created).total_seconds())
        CARD_ANSWER.observe(waited)
        span = trace.get_current_span()
        span.set_attribute("agentchat.result", result)
        span.set_attribute("agentchat.confirm_id", str(pending.get("confirm_id")))
        span.set_attribute("agentchat.card_wait_s", round(waited, 3))
