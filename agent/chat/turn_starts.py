"""The one way a turn starts (docs/protocol.md §1–§4): its plan (the tools offered, the
prefetch), its records, its graph input, then `TurnRunner.start`.

    a message      `message`: a new conversation in one statement, or an existing one in one
                   transaction (storage/submits.py); what stands in the way is settled first
    a card's       `resume`: the graph goes on from its interrupt with the answer
    answer
    a retry        `retry`: the last turn again from its user message, or, if it died mid-step,
                   from its last checkpoint (`resume_orphan`)
    a fork         `fork`: an edit or a regenerate (protocol.md §4), a new branch from the
                   checkpoint just before the user message it replaces (forks.py), planned afresh
    a takeover     `take_over`: a dead replica's run goes on here (takeover.py), its turn from
                   its last checkpoint as a retry would, under the same turn id

Selection is a few ms of CPU (embeddings): it runs in a worker thread, before any statement, so
no connection is held while it runs.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langgraph.types import Command

from agentchat.agent.chat import forks
from agentchat.agent.chat.request import ChatRequest
from agentchat.agent.chat.turn_task import Turn, TurnRunner
from agentchat.agent.chat.upload_book import UploadBook
from agentchat.agent.graph.prompt import TurnContext
from agentchat.agent.graph.state import TurnRuntime
from agentchat.agent.graph.taint import user_message
from agentchat.agent.selection.turn_tools import TurnToolChooser
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import branches, confirmations, conversations, submits
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db, Row
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal
from agentchat.words import Lang, turn_language


class TurnStarts:
    def __init__(self, *, settings: AgentSettings, pool: Db, runner: TurnRunner,
                 tools: TurnToolChooser, replica: str, uploads: UploadBook) -> None:
        self.settings = settings
        self.uploads = uploads  # a message's files are deleted with its conversation
        self.replica = replica  # this replica's id (runs live elsewhere are others')
        self.pool = pool
        self.runner = runner
        self.tools = tools

    # -- plans ------------------------------------------------------------------------------------

    async def plan(self, conversation_id: str, turn_id: str, token: str, text: str,
                   env_id: str | None, uicontext: dict[str, Any] | None) -> TurnRuntime:
        """A new plan for a turn: the tools offered and the prefetch (a message, a retry)."""
        plan = await asyncio.to_thread(self.tools.choose, text, uicontext, env_id)
        return TurnRuntime(conversation_id=conversation_id, user_jwt=token, tools=plan.tools,
                           turn=TurnContext(env_id=env_id, uicontext=uicontext),
                           prefetch=plan.prefetch,
                           confirmation_ttl_s=self.settings.confirmation_ttl_s,
                           turn_id=turn_id, lang=turn_language(text))

    def replan(self, conversation_id: str, token: str, last: Row | None) -> TurnRuntime:
        """A resume (a card's answer, an orphan) gates against the set the turn offered, with
        its UIContext and environment; no new plan and no second prefetch."""
        plan = (last or {}).get("plan") or {}
        return TurnRuntime(conversation_id=conversation_id, user_jwt=token,
                           tools=list(plan.get("tools") or []),
                           turn=TurnContext(env_id=plan.get("env_id"),
                                            uicontext=plan.get("uicontext"),
                                            forked_from=plan.get("forked_from")),
                           confirmation_ttl_s=self.settings.confirmation_ttl_s,
                           turn_id=str((last or {}).get("id") or ""),
                           lang="en" if plan.get("lang") == "en" else "ru",
                           branch=plan.get("branch"))

    @staticmethod
    def record_of(runtime: TurnRuntime) -> dict[str, Any]:
        """The plan as the turn's row keeps it (what a resume gates against)."""
        return {"tools": runtime.tools, "env_id": runtime.turn.env_id,
                "uicontext": runtime.turn.uicontext, "lang": runtime.lang,
                "branch": runtime.branch, "forked_from": runtime.turn.forked_from}

    # -- a message --------------------------------------------------------------------------------

    async def message(self, req: ChatRequest, principal: Principal, tab: str,
                      settle: Callable[[submits.Opened], Awaitable[bool]]) -> Turn:
        """A message: a new conversation when `req` names none, else the turn on the owner's
        conversation, stored once nothing stands in its way; `settle(opened)` clears what does
        (a run elsewhere, a pending card, an unfinished turn; True when it answered the last
        turn's calls) before the statement is tried again, at most four times in all."""
        new = req.conversation_id is None
        conversation_id = str(uuid.uuid4()) if new else str(req.conversation_id)
        turn_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
        text = f"{req.text}\n\n{req.attached}".strip() if req.attached else req.text
        assert req.user_jwt is not None
        runtime = await self.plan(conversation_id, turn_id, req.user_jwt, req.text, req.env_id,
                                  req.uicontext)
        if new:  # a conversation's first branch is named by its first message
            runtime = replace(runtime, branch=message_id)
        rows: dict[str, Any] = {"turn_id": turn_id, "plan": self.record_of(runtime),
                                "message_id": message_id, "content": text,
                                "title": conversations.title_from(req.text)}
        if new:
            await submits.start_conversation(self.pool, conversation_id=conversation_id,
                                             owner=principal.sub, tab=tab,
                                             lease_s=self.settings.tuning.lease_s, **rows)
        else:
            settled = False  # an unfinished last turn's calls were answered
            for _ in range(4):
                opened = await submits.begin_message(
                    self.pool, conversation_id=conversation_id, owner=principal.sub, tab=tab,
                    lease_s=self.settings.tuning.lease_s, replica=self.replica,
                    lost_s=self.settings.tuning.run_lost_s, last_settled=settled, **rows)
                if opened.started:
                    runtime = replace(runtime, branch=opened.branch)
                    break
                settled = await settle(opened) or settled
            else:
                raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")
        self.uploads.used_in(conversation_id, (f["key"] for f in req.files))  # deleted with it
        graph_input = {"messages": [user_message(text, message_id=message_id,
                                                 with_files=bool(req.attached))]}
        return self.runner.start(Turn(conversation_id, turn_id, tab, runtime, graph_input,
                                      new_thread=new))

    async def settle_orphan(self, conversation_id: str, last: Row) -> None:
        """Before a new message: a run that died mid-step (sweeper.py) gets its dangling calls
        answered, so the model never sees a call without a result."""
        await self.runner.close_dangling(
            conversation_id, "interrupted: the agent stopped before this call finished",
            "error")
        if last["status"] == "running":  # we hold the lease: nobody is running it
            await turn_records.finish_turn(self.pool, last["id"], "failed",
                                           str(ErrorCode.INTERNAL))

    # -- a resume, a retry ------------------------------------------------------------------------

    def resume(self, conversation_id: str, tab: str, token: str, last: Row | None,
               turn_id: str, graph_input: Any, *, keep_token: bool = True) -> Turn:
        """The graph goes on from where its turn stopped (its row already `running` again);
        `keep_token` False: the token is an approver's, never kept for a takeover."""
        runtime = replace(self.replan(conversation_id, token, last), keep_token=keep_token)
        return self.runner.start(Turn(conversation_id, turn_id, tab, runtime, graph_input))

    async def resume_orphan(self, state: Any, last: Row, token: str, conversation_id: str,
                            tab: str) -> Turn | None:
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
            resume: dict[str, Any] = {"result": row["status"], "confirm_id": row["confirm_id"]}
            listed = (row["payload"] or {}).get("calls")
            if listed:  # a batched card: each call's own answer, as stored with the card
                resume["calls"] = {c["call_id"]: {"result": c.get("result", "denied")}
                                   for c in listed}
            graph_input = Command(resume=resume)
        await turn_records.resume_turn(self.pool, last["id"])
        return self.resume(conversation_id, tab, token, last, last["id"], graph_input)

    async def retry(self, token: str, conversation_id: str, tab: str, last: Row | None) -> Turn:
        if last is None:
            raise AgentChatError(ErrorCode.NOT_FOUND, "there is no turn to retry")
        state = await self.runner.state(conversation_id)
        if last["status"] in ("running", "failed"):
            resumed = await self.resume_orphan(state, last, token, conversation_id, tab)
            if resumed is not None:
                return resumed
        turn_id = str(uuid.uuid4())
        plan = last.get("plan") or {}
        runtime = await self.plan(conversation_id, turn_id, token, last["user_text"],
                                  plan.get("env_id"), plan.get("uicontext"))
        runtime = replace(runtime, branch=plan.get("branch"))
        await turn_records.start_turn(self.pool, turn_id, conversation_id,
                                      self.record_of(runtime))
        return self.runner.start(Turn(conversation_id, turn_id, tab, runtime,
                                      self.rerun_input(state, last)))

    @staticmethod
    def rerun_input(state: Any, last: Row) -> dict[str, Any]:
        """Re-run from the turn's user message: drop what followed it, keep the message
        itself (and its mark: file text stays file text, agent/graph/taint.py)."""
        messages: list[BaseMessage] = state.values.get("messages", [])
        ids = [m.id for m in messages]
        human_id = last["user_message_id"]
        after = ids[ids.index(human_id) + 1:] if human_id in ids else []
        human = next((m for m in messages if m.id == human_id), None)
        return {"messages": [*(RemoveMessage(id=i) for i in after if i),
                             HumanMessage(content=last["user_text"], id=human_id,
                                          additional_kwargs=dict(
                                              human.additional_kwargs if human else {}))]}

    async def take_over(self, token: str, conversation_id: str, tab: str, last: Row) -> Turn:
        """A run claimed from a dead or draining replica (takeover.py) goes on here from its
        last checkpoint: an answered card's (the confirmed call keeps its idempotency key, so
        it runs once), else its turn's start, the user message again, under the same turn id.
        The old attempt's calls still `running` are closed first: it wrote nothing since."""
        await turn_records.close_dangling_calls(self.pool, conversation_id, "error")
        state = await self.runner.state(conversation_id)
        resumed = await self.resume_orphan(state, last, token, conversation_id, tab)
        if resumed is not None:
            return resumed
        plan = last.get("plan") or {}
        runtime = await self.plan(conversation_id, str(last["id"]), token, last["user_text"],
                                  plan.get("env_id"), plan.get("uicontext"))
        runtime = replace(runtime, branch=plan.get("branch"))
        return self.runner.start(Turn(conversation_id, str(last["id"]), tab, runtime,
                                      self.rerun_input(state, last)))

    # -- a fork (docs/protocol.md §4, "Branches") --------------------------------------------------

    async def fork(self, req: ChatRequest, principal: Principal, tab: str,
                   settle: Callable[[submits.Opened], Awaitable[bool]]
                   ) -> tuple[Turn, dict[str, Any]]:
        """An edit (`req.message_id`, a user message, with the new text) or a regenerate (an
        answer, default the last; its user message runs again): a new user message on a new
        branch after the replaced one's parent, planned and gated afresh, its turn run from
        the checkpoint before the replaced message. Also returns the run's first event,
        `forked`: the new message and what the abandoned branch already executed, which the
        model's context states too. `settle` as for a message; it refuses a pending card."""
        cid = str(req.conversation_id)
        assert req.user_jwt is not None
        point = await branches.fork_point(self.pool, owner=principal.sub, conversation_id=cid,
                                          message_id=req.message_id, kind=str(req.action))
        editing = req.action == "edit"
        text = req.text if editing else str(point["content"])
        content = f"{text}\n\n{req.attached}".strip() if editing and req.attached else text
        old_plan = point.get("plan") or {}
        turn_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
        runtime = await self.plan(cid, turn_id, req.user_jwt, text,
                                  req.env_id or old_plan.get("env_id"),
                                  req.uicontext or old_plan.get("uicontext"))
        forked_from = {"message_id": point["id"],
                       "executed": self.executed(point["executed"], runtime.lang)}
        runtime = replace(runtime, turn=replace(runtime.turn, forked_from=forked_from))
        rows: dict[str, Any] = {"turn_id": turn_id, "plan": self.record_of(runtime),
                                "message_id": message_id, "content": content,
                                "title": conversations.title_from(text)}
        settled = False
        for _ in range(4):
            opened = await submits.begin_message(
                self.pool, conversation_id=cid, owner=principal.sub, tab=tab,
                lease_s=self.settings.tuning.lease_s, replica=self.replica,
                lost_s=self.settings.tuning.run_lost_s, last_settled=settled, fork=True,
                parent=point["parent"], **rows)
            if opened.started:
                break
            settled = await settle(opened) or settled
        else:
            raise AgentChatError(ErrorCode.CONVERSATION_BUSY, "a turn is already running")
        runtime = replace(runtime, branch=opened.branch)
        self.uploads.used_in(cid, (f["key"] for f in req.files))
        human = user_message(content, message_id=message_id, with_files=bool(req.attached))
        try:
            graph_input = await forks.fork_input(
                self.runner.graph, self.runner.config(cid), replaced=str(point["id"]),
                prev_user=point["prev_user"], human=human)
        except BaseException:
            await turn_records.finish_turn(self.pool, turn_id, "failed",
                                           str(ErrorCode.INTERNAL))
            raise
        turn = self.runner.start(Turn(cid, turn_id, tab, runtime, graph_input))
        return turn, {"type": "forked", "message_id": message_id,
                      "parent_id": point["parent"] or None, "forked_from": forked_from}

    def executed(self, calls: list[Row], lang: Lang) -> list[dict[str, Any]]:
        """The writes among calls that ran or may have run, as `forked_from` lists them: the
        catalog's tool, its title in the turn's language, the environment it targeted, its
        outcome (ok, timeout, error, cancelled, running)."""
        catalog = self.tools.catalogs.current()
        out = []
        for call in calls:
            tool = catalog.get(str(call["tool"]))
            if tool is None or tool.risk == "read":
                continue
            target, _ = tool.environments_of(call.get("input") or {})
            out.append({"tool_name": tool.name, "title": tool.title_in(lang),
                        "environment": target, "outcome": call.get("outcome")})
        return out
