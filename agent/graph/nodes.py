"""The graph's nodes (agent/graph/builder.py draws the graph): prefetch, model, policy,
confirm, tools, answer (after someone else's approval). Each is a LangGraph node over one
set of dependencies (`GraphDeps`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command
from opentelemetry import trace

from agentchat.agent.audit.store import CallRef, Entry
from agentchat.agent.audit.trail import cut_text, decision_detail
from agentchat.agent.graph import plans
from agentchat.agent.graph.calls import refused_call, tool_schemas, with_unique_ids
from agentchat.agent.graph.cards import CardWords, refusal
from agentchat.agent.graph.model import stream_reply
from agentchat.agent.graph.names import known_names
from agentchat.agent.graph.prompt import context_message
from agentchat.agent.graph.state import (
    EXPIRED,
    FORKED_CARD,
    PREFETCH_NAME,
    REFUSED,
    SELF_ANSWER,
    UNTRUSTED_CARD,
    AgentState,
    GraphDeps,
    TurnRuntime,
    last_ai,
)
from agentchat.agent.graph.taint import context_taint
from agentchat.agent.graph.tool_runtime import (
    CATALOG_CHANGED,
    INVALID_ARGUMENTS,
    refusal_event,
    tool_title,
)
from agentchat.agent.graph.verdicts import Verdicts, ask_card, cards_for, settle
from agentchat.catalog import Catalog
from agentchat.digest import object_key
from agentchat.errors import AgentChatError, ErrorCode, error_body
from agentchat.tool_request import InvalidArguments, validate_arguments

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
        trail: list[Entry] = []
        taint = context_taint(state.get("messages", []), ctx.turn.uicontext)
        catalog = self.deps.catalog  # one revision for every check of this pass
        try:
            for call in ai.tool_calls:
                call_id = call["id"] or ""
                if call_id not in decisions:
                    try:
                        decisions[call_id] = await self._gate_call(call, offered, ctx, taint,
                                                                   catalog)
                    except AgentChatError as e:
                        trail += self._audit_not_run(ctx, call, "policy_unavailable"
                                                     if e.code is ErrorCode.POLICY_UNAVAILABLE
                                                     else "refused", str(e.code))
                        raise
                    trail += self._audit_decision(ctx, call, decisions[call_id], taint)
                d = decisions[call_id]
                if d["decision"] == REFUSED:
                    title = tool_title(catalog, call["name"], ctx.lang)
                    writer({"type": "tool_start", "tool": call["name"], "title": title,
                            "call_id": call_id, "input": call["args"]})
                    writer(refusal_event(call["name"], call_id, f"not run: {d['detail']}",
                                         title))
        finally:
            if self.deps.audit is not None:
                await self.deps.audit.append(trail)
        return {"decisions": decisions}

    def _audit_decision(self, ctx: TurnRuntime, call: Any, d: dict[str, Any],
                        taint: str | None) -> list[Entry]:
        """The decision row of an audited call (a refused one: why it does not run)."""
        ref = self._audit_ref(ctx, call)
        if ref is None:
            return []
        out = []
        # The call's first row names its branch (docs/protocol.md §4, "Branches").
        if d.get("decision_id"):  # the sidecar answered (a refusal of its own included)
            detail = {**decision_detail(d, kind="check", taint=taint), "branch": ctx.branch}
            if d.get("grant_id"):  # covered by a time-boxed grant (docs/protocol.md §11)
                detail["grant_id"] = d["grant_id"]
            out.append(ref.entry("decision", detail))
        if d.get("decision") == REFUSED:
            out.append(ref.entry("not_run", {"reason": "refused", "branch": ctx.branch,
                                             "detail": cut_text(d.get("detail"))}, once=True))
        return out

    def _audit_not_run(self, ctx: TurnRuntime, call: Any, reason: str,
                       detail: str) -> list[Entry]:
        ref = self._audit_ref(ctx, call)
        if ref is None:
            return []
        return [ref.entry("not_run", {"reason": reason, "detail": cut_text(detail)}, once=True)]

    async def _gate_call(self, call: Any, offered: set[str], ctx: TurnRuntime,
                         taint: str | None, catalog: Catalog) -> dict[str, Any]:
        """Our own checks, then the sidecar's, on exactly the arguments that would be sent;
        in an untrusted context a write the sidecar lets run without a card gets one."""
        tool = catalog.get(call["name"])
        if tool is None or call["name"] not in offered:
            return refused_call(f"the tool {call['name']!r} was not offered in this turn")
        try:
            args = validate_arguments(tool, call["args"])
        except InvalidArguments as e:
            return refused_call(f"invalid arguments: {e}")
        d = await self.deps.policy.check_call(user_jwt=ctx.user_jwt, tool=tool, arguments=args,
                                              untrusted=taint is not None,
                                              catalog_revision=catalog.revision)
        if d.get("decision") == "deny" and d.get("reason_code") == INVALID_ARGUMENTS:
            return refused_call(f"invalid arguments: {d.get('detail') or 'refused by the policy'}")
        own = self._own_card(tool, taint, ctx)
        if own is not None and d.get("decision") == "allow":
            # The agent's own rule, whatever the policy's lines say: text from outside the
            # user's words may have asked for this call (README.md, "Safety properties"), or the
            # turn is a fork after a write.
            d = {**d, "decision": "allow_with_confirmation", "confirmation_required": True,
                 "reason_code": own}
        if UNTRUSTED_CARD in (own, d.get("reason_code")):
            d = {**d, "untrusted_source": taint}
        return await self._granted(d, tool, args, ctx, own)

    @staticmethod
    def _own_card(tool: Any, taint: str | None, ctx: TurnRuntime) -> str | None:
        """Why a write needs the requester's own card whatever the policy says (a card's
        `reason_code`): an untrusted context, or a forked turn (edit, regenerate) whose
        abandoned branch ran or may have run a write (docs/protocol.md §4, "Branches")."""
        if tool.risk == "read":
            return None
        if taint is not None:
            return UNTRUSTED_CARD
        return FORKED_CARD if (ctx.turn.forked_from or {}).get("executed") else None

    async def _granted(self, d: dict[str, Any], tool: Any, args: dict[str, Any],
                       ctx: TurnRuntime, own: str | None) -> dict[str, Any]:
        """A call the sidecar sends to someone else's approval, covered by a live time-boxed
        grant of an earlier approval (docs/protocol.md §11): the grant stands for that
        approval and nothing else. Otherwise the call runs without a card; a write that needs
        the requester's own card (`own`: an untrusted context, a fork after a write) still
        shows it (its `reason` says why), its decision carrying both the grant and why."""
        approval = d.get("approval") or {}
        if (self.deps.grants is None or d.get("decision") != "allow_with_confirmation"
                or approval.get("mode") != "other"):
            return d
        key = object_key(args, tool.free_text)
        grant_id = await self.deps.grants(ctx.conversation_id, tool.name,
                                          d.get("env_context"), key)
        if grant_id is None:
            return d
        if own is not None:
            return {**d, "reason_code": own, "grant_id": grant_id,
                    "approval": dict(SELF_ANSWER)}
        return {**d, "decision": "allow", "confirmation_required": False, "grant_id": grant_id}

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
        entries = []
        for call in ai.tool_calls:
            reason = verdicts.reasons.get(call["id"] or "")
            ref = self._audit_ref(ctx, call) if reason is not None else None
            if reason is not None and ref is not None:
                entries.append(ref.entry("not_run", {"reason": reason[0],
                                                     "detail": reason[1]}, once=True))
        await self.deps.audit.append(entries)

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
        judged = state.get("approved_revisions", {})
        catalog = self.deps.catalog  # read once: every request of this pass from one revision
        results: list[ToolMessage] = []
        halt = None
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            if call_id not in state.get("approved", []):
                continue
            if judged.get(call_id) != catalog.revision:
                # The catalog changed after the sidecar judged this call (a path or method may
                # differ now): nothing is built from a revision it did not judge.
                results.append(await self._catalog_changed(ctx, call, writer))
                continue
            if halt is not None:
                results.append(refusal(call, "not run: the ss-tools API refused this turn"))
                await self._audit(ctx, call, "not_run", {
                    "reason": "halted", "detail": "the ss-tools API refused an earlier call"})
                continue
            decision_id = in_force.get(call_id) or decided.get(call_id, {}).get("decision_id")
            try:
                outcome = await self.deps.tools.run(
                    catalog=catalog, tool_name=call["name"], call_id=call_id, args=call["args"],
                    user_jwt=ctx.user_jwt, idempotency_key=keys.get(call_id), emit=writer,
                    lang=ctx.lang, decision_id=decision_id)
            except asyncio.CancelledError:
                # Stopped while it ran: ss-tools may have executed it, so the trail says so,
                # with the key and decision its audit is found by. Shielded: the turn's task
                # is being cancelled, and a second cancel must not lose the row.
                await asyncio.shield(self._audit(ctx, call, "execution", {
                    "idempotency_key": keys.get(call_id), "decision_id": decision_id,
                    "outcome": "cancelled", "replayed": False, "attempts": None,
                    "duration_ms": None, "error": "the turn was stopped while the call ran"}))
                raise
            await self._audit(ctx, call, "execution", {
                "idempotency_key": keys.get(call_id), "decision_id": decision_id,
                "outcome": outcome.status, "replayed": outcome.replayed,
                "attempts": outcome.attempts, "duration_ms": outcome.duration_ms,
                "error": cut_text(outcome.error)})
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

    async def _catalog_changed(self, ctx: TurnRuntime, call: Any,
                               writer: Callable[[Any], None]) -> ToolMessage:
        text = "not run: the tool catalog changed after this call was checked; ask again"
        title = tool_title(self.deps.catalog, call["name"], ctx.lang)
        writer({"type": "tool_start", "tool": call["name"], "title": title,
                "call_id": call["id"], "input": call["args"]})
        writer(refusal_event(call["name"], call["id"] or "", text, title, CATALOG_CHANGED))
        await self._audit(ctx, call, "not_run", {"reason": "policy_unavailable",
                                                 "detail": "catalog_changed"})
        return refusal(call, text)

    async def _audit(self, ctx: TurnRuntime, call: Any, stage: str,
                     detail: dict[str, Any]) -> None:
        """One row for an audited call, right after what it records (an execution is on the
        chain before the model sees its result)."""
        ref = self._audit_ref(ctx, call)
        if ref is not None and self.deps.audit is not None:
            await self.deps.audit.append([ref.entry(stage, detail)])

    def _audit_ref(self, ctx: TurnRuntime, call: Any) -> CallRef | None:
        """The columns of an audited call's rows; None when the call is not audited."""
        audit = self.deps.audit
        if audit is None or not audit.audited(call["name"]):
            return None
        return audit.ref(conversation_id=ctx.conversation_id, turn_id=ctx.turn_id,
                         call_id=call["id"] or "", tool=call["name"], args=call["args"])
