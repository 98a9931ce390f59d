"""The graph's nodes (agent/graph/builder.py draws the graph): prefetch, model, policy,
confirm, tools, answer (after someone else's approval). Each is a LangGraph node over one
set of dependencies (`GraphDeps`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command
from opentelemetry import trace

from agentchat.agent.audit.store import Entry
from agentchat.agent.gate.audit_rows import CallAudit
from agentchat.agent.gate.checks import REFUSED
from agentchat.agent.gate.execution import CHANGED_TEXT, JudgedCall
from agentchat.agent.gate.tool_runtime import CATALOG_CHANGED, refusal_event, tool_title
from agentchat.agent.graph import plans
from agentchat.agent.graph.calls import tool_schemas, with_unique_ids
from agentchat.agent.graph.cards import CardWords, refusal
from agentchat.agent.graph.model import stream_reply
from agentchat.agent.graph.names import known_names
from agentchat.agent.graph.prompt import context_message
from agentchat.agent.graph.state import (
    EXPIRED,
    PREFETCH_NAME,
    AgentState,
    GraphDeps,
    TurnRuntime,
    last_ai,
)
from agentchat.agent.graph.taint import context_taint, own_result
from agentchat.agent.graph.verdicts import Verdicts, ask_card, cards_for, settle
from agentchat.errors import AgentChatError, ErrorCode, error_body

TRACER = trace.get_tracer("agentchat.agent")


class Nodes:
    """The graph's nodes over one set of dependencies. Each is a LangGraph node: `(state,
    runtime)` to a state update, or a `Command` where the node itself picks what runs next."""

    def __init__(self, deps: GraphDeps) -> None:
        self.deps = deps

    async def prefetch(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        with TRACER.start_as_current_span("agentchat.graph.prefetch", attributes={
                "agentchat.calls": len(runtime.context.prefetch)}):
            return self._prefetch(runtime)

    def _prefetch(self, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        calls = [{"name": c["name"], "args": c["args"], "id": c["id"], "type": "tool_call"}
                 for c in runtime.context.prefetch]
        # Named, so the model can tell the agent's own prefetch from calls it made itself.
        return {"messages": [AIMessage(content="", tool_calls=calls, name=PREFETCH_NAME)],
                "decisions": {}}

    async def model(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        ctx = runtime.context
        # A takeover goes on with the step stored before its write ran (agent/graph/plans.py).
        kept = await plans.replayed(ctx.turn_id, state["messages"],
                                    ctx.text_out or get_stream_writer())
        if kept is not None:
            return {"messages": [kept[0]], "decisions": kept[1], "approved": [],
                    "approved_keys": {}}
        schemas = tool_schemas(self.deps.catalog, ctx.tools, ctx.lang)
        try:
            # The node reads the model's stream itself and writes its text to the graph's
            # custom stream: no per-token callback (stream_mode "messages") and no list of
            # every chunk until the end (agent/graph/model.py).
            response = await stream_reply(self.deps.llm, [context_message(ctx.turn, ctx.lang),
                                                          *state["messages"]],
                                          schemas, ctx.text_out or get_stream_writer())
        except AgentChatError:
            raise
        except Exception as e:  # any failure of the endpoint: refused, 5xx, timeout, cut stream
            raise AgentChatError(ErrorCode.LLM_UNAVAILABLE,
                                 f"the model is unavailable ({type(e).__name__})") from None
        step = f"{ctx.turn_id}:{len(state['messages'])}" if ctx.turn_id else None
        response, refused = with_unique_ids(response, step)
        response, refused = await plans.kept(self.deps.catalog, ctx.turn_id, state["messages"],
                                             response, refused)
        return {"messages": [response], "decisions": refused, "approved": [],
                "approved_keys": {}}

    async def policy(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        ai = last_ai(state)
        assert ai is not None
        with TRACER.start_as_current_span("agentchat.graph.policy", attributes={
                "agentchat.calls": len(ai.tool_calls)}):
            return await self._policy(ai, state, runtime.context)

    async def _policy(self, ai: AIMessage, state: AgentState,
                      ctx: TurnRuntime) -> dict[str, Any]:
        writer = get_stream_writer()
        decisions = dict(state.get("decisions") or {})
        offered = set(ctx.tools) if ai.name != PREFETCH_NAME else {
            c["name"] for c in ctx.prefetch}
        rows = self._rows(ctx)
        trail: list[Entry] = []
        taint = context_taint(state.get("messages", []), ctx.turn.uicontext)
        catalog = self.deps.catalog  # one revision for every check of this pass
        grants = self.deps.grants
        lookup = None if grants is None else functools.partial(grants, ctx.conversation_id)
        try:
            for call in ai.tool_calls:
                call_id = call["id"] or ""
                if call_id not in decisions:
                    try:
                        decisions[call_id] = await self.deps.gate.check(
                            call["name"], call["args"], offered=offered, user_jwt=ctx.user_jwt,
                            taint=taint, catalog=catalog,
                            forked_write=bool((ctx.turn.forked_from or {}).get("executed")),
                            grants=lookup)
                    except AgentChatError as e:
                        trail += rows.not_run(call_id, call["name"], call["args"],
                                              "policy_unavailable"
                                              if e.code is ErrorCode.POLICY_UNAVAILABLE
                                              else "refused", str(e.code))
                        raise
                    trail += rows.decision(call_id, call["name"], call["args"],
                                           decisions[call_id], taint)
                d = decisions[call_id]
                if d["decision"] == REFUSED:
                    title = tool_title(catalog, call["name"], ctx.lang)
                    writer({"type": "tool_start", "tool": call["name"], "title": title,
                            "call_id": call_id, "input": call["args"]})
                    writer(refusal_event(call["name"], call_id, f"not run: {d['detail']}",
                                         title, d["reason_code"]))
        finally:
            await rows.append(trail)
        return {"decisions": decisions}

    def _rows(self, ctx: TurnRuntime) -> CallAudit:
        """Where this turn's calls are recorded; the first row of each names its branch
        (docs/protocol.md §4, "Branches")."""
        return CallAudit(self.deps.audit, ctx.conversation_id, ctx.turn_id, "chat",
                         about={"branch": ctx.branch}, refusal_about={"branch": ctx.branch})

    async def confirm(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> Command[
            Literal["tools", "model", "answer"]]:
        ai = last_ai(state)
        assert ai is not None
        # Ended by the card's interrupt on every pass but the last: not an error.
        with TRACER.start_as_current_span("agentchat.graph.confirm", record_exception=False,
                                          set_status_on_exception=False):
            return await self._confirm(ai, state, runtime.context)

    async def _confirm(self, ai: AIMessage, state: AgentState, ctx: TurnRuntime) -> Command[
            Literal["tools", "model", "answer"]]:
        verdicts = Verdicts()
        words = CardWords(self.deps.catalog, ctx,
                           known_names(state.get("messages", []), self.deps.catalog, ctx.lang))
        decisions = state.get("decisions", {})
        carded = [(call, decisions.get(call["id"] or "", {})) for call in ai.tool_calls]
        carded = [(call, d) for call, d in carded if not settle(call, d, words, verdicts)]
        for group in cards_for(carded):
            if verdicts.expired:  # no more cards once one expired
                for call, _ in group:
                    verdicts.refuse(call, EXPIRED, "expired")
                continue
            ask_card(group, words, verdicts)
        if verdicts.expired:
            expired = Verdicts()
            for call in ai.tool_calls:
                expired.refuse(call, EXPIRED, "expired")
            verdicts = expired
        if verdicts.by_approval:
            verdicts.only_what_approvers_approved(ai.tool_calls)
        # The last pass (no card left to ask): why each refused call does not run, once.
        await self._audit_refusals(ctx, ai, verdicts)
        goto: Literal["tools", "model", "answer"] = (
            "tools" if verdicts.approved else "answer" if verdicts.by_approval else "model")
        return Command(goto=goto, update={"answer_only": verdicts.by_approval,
                                          "approved": verdicts.approved,
                                          "approved_keys": verdicts.keys,
                                          "approved_decisions": verdicts.decision_ids,
                                          "approved_revisions": verdicts.revisions,
                                          "messages": verdicts.refused})

    async def _audit_refusals(self, ctx: TurnRuntime, ai: AIMessage,
                              verdicts: Verdicts) -> None:
        if self.deps.audit is None:
            return
        rows = self._rows(ctx)
        entries = []
        for call in ai.tool_calls:
            reason = verdicts.reasons.get(call["id"] or "")
            ref = rows.ref(call["id"] or "", call["name"], call["args"]) \
                if reason is not None else None
            if reason is not None and ref is not None:
                entries.append(ref.entry("not_run", {"reason": reason[0],
                                                     "detail": reason[1]}, once=True))
        await rows.append(entries)

    async def tools(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> Command[
            Literal["model", "answer", "__end__"]]:
        ai = last_ai(state)
        assert ai is not None
        with TRACER.start_as_current_span("agentchat.graph.tools", attributes={
                "agentchat.calls": len(state.get("approved", []))}):
            return await self._tools(ai, state, runtime.context)

    async def _tools(self, ai: AIMessage, state: AgentState, ctx: TurnRuntime) -> Command[
            Literal["model", "answer", "__end__"]]:
        writer = get_stream_writer()
        keys = state.get("approved_keys", {})
        decided = state.get("decisions", {})
        in_force = state.get("approved_decisions", {})
        revisions = state.get("approved_revisions", {})
        catalog = self.deps.catalog  # read once: every request of this pass from one revision
        results: list[ToolMessage] = []
        rows = self._rows(ctx)
        halt = None
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            if call_id not in state.get("approved", []):
                continue
            judged = JudgedCall(
                call_id, call["name"], call["args"], revisions.get(call_id),
                in_force.get(call_id) or decided.get(call_id, {}).get("decision_id"),
                keys.get(call_id))
            if self.deps.execution.changed(judged, catalog):
                results.append(await self._catalog_changed(ctx, rows, judged, writer))
                continue
            if halt is not None:
                results.append(refusal(call, "not run: the ss-tools API refused this turn"))
                await rows.stage(call_id, call["name"], call["args"], "not_run", {
                    "reason": "halted", "detail": "the ss-tools API refused an earlier call"})
                continue
            outcome = await self.deps.execution.run(rows, judged, catalog=catalog,
                                                    user_jwt=ctx.user_jwt, emit=writer,
                                                    lang=ctx.lang)
            results.append(ToolMessage(content=outcome.message_text(), tool_call_id=call_id,
                                       name=call["name"],
                                       status="success" if outcome.status == "ok" else "error"))
            if outcome.status == "forbidden":
                # The title, not the machine name: an error's detail is shown to people.
                title = tool_title(self.deps.catalog, call["name"], "en")
                halt = error_body(ErrorCode.FORBIDDEN, f"the ss-tools API refused “{title}”")
        # From here on ss-tools text is in the model's context: the results' ToolMessages
        # make every later check of the thread untrusted (agent/graph/taint.py).
        # After calls someone else approved, the model answers without tools (`answer`).
        goto: Literal["model", "answer", "__end__"] = (
            "__end__" if halt else "answer" if state.get("answer_only") else "model")
        return Command(goto=goto,
                       update={"messages": results, "approved": [], "halt": halt})

    async def answer(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        """The turn's last step after someone else's approval (docs/protocol.md §11): the
        model answers with no tool offered, and a call it names anyway is dropped: the
        approver's token served the calls they approved, anything more is the requester's
        next turn."""
        ctx = runtime.context
        with TRACER.start_as_current_span("agentchat.graph.answer"):
            try:
                response = await stream_reply(self.deps.llm, [context_message(ctx.turn, ctx.lang),
                                                              *state["messages"]],
                                              [], ctx.text_out or get_stream_writer())
            except AgentChatError:
                raise
            except Exception as e:  # as the model node: the endpoint failed
                raise AgentChatError(ErrorCode.LLM_UNAVAILABLE,
                                     f"the model is unavailable ({type(e).__name__})") from None
        return {"messages": [AIMessage(content=response.content, id=response.id,
                                       usage_metadata=response.usage_metadata,
                                       response_metadata=response.response_metadata)],
                "answer_only": False}

    async def _catalog_changed(self, ctx: TurnRuntime, rows: CallAudit, call: JudgedCall,
                               writer: Callable[[Any], None]) -> ToolMessage:
        title = tool_title(self.deps.catalog, call.tool, ctx.lang)
        writer({"type": "tool_start", "tool": call.tool, "title": title,
                "call_id": call.call_id, "input": call.args})
        writer(refusal_event(call.tool, call.call_id, CHANGED_TEXT, title, CATALOG_CHANGED))
        await self.deps.execution.record_changed(rows, call)
        return own_result(CHANGED_TEXT, tool_call_id=call.call_id, name=call.tool)
