"""The agent graph: model → policy → confirm → tools → model …

- `model` streams tokens (the only node whose tokens reach the user) and plans tool calls
  from the tools selected for this turn.
- `model` also gives every call an id unique within the conversation before the message is
  checkpointed (a model that repeats `call_0`, or sends none, cannot make one decision cover
  another call).
- `policy` refuses calls to tools not offered this turn and arguments that fail the tool's
  schema (`tool_error {reason: "invalid_arguments"}`, nothing sent), then asks the sidecar about
  every other call, with exactly the validated arguments, before any runs; it keeps the
  decisions in the state, so a resumed run never asks again. Once anything from outside the
  user's own words is in the model's context, in this turn or an earlier one
  (agent/graph/taint.py), every check says so and every write needs a card.
- `confirm` turns each decision that needs a human into an `interrupt()` whose value is the
  `confirm_required` card, one at a time and in order. It has no side effects before its
  interrupts: the node re-runs from its start on every resume.
- `tools` runs the approved calls through the tool runtime; refused ones already have their
  ToolMessage.
- `prefetch` (first, when the turn has prefetch calls) is an ordinary tool call made by the
  agent: it goes through policy, confirm and tools like any other.

Audit (issue 20, agent/audit/trail.py): `policy` appends each audited call's decision,
`confirm` why a call it refuses does not run, `tools` each execution (and sends the decision's
id with it); cards and answers are appended where they are stored. Spans: one per node
(`agentchat.graph.<node>`; the model node's is its own), one per card (`agentchat.card`).

Words (issue 18): everything said to people is in the turn's language (`TurnRuntime.lang`):
the system prompt and tool descriptions the model gets, tool events' `title`, the card's
`prompt` (the catalog's template; object names only from ss-tools results or the matching
UIContext object, quoted and cut: agent/graph/names.py) and its alternatives (the catalog's
words for the actions the sidecar allowed).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from opentelemetry import trace
from typing_extensions import TypedDict

from agentchat.agent.audit.store import CallRef, Entry
from agentchat.agent.audit.trail import AuditTrail, cut_text, decision_detail
from agentchat.agent.graph.model import stream_reply
from agentchat.agent.graph.names import known_names, names_for_call
from agentchat.agent.graph.offline.planner import context_message
from agentchat.agent.graph.offline.rules import TurnContext
from agentchat.agent.graph.policy_client import PolicyClient
from agentchat.agent.graph.taint import context_taint, own_result, taint_reason
from agentchat.agent.graph.tool_runtime import (
    CATALOG_CHANGED,
    INVALID_ARGUMENTS,
    ToolRuntime,
    refusal_event,
    tool_title,
)
from agentchat.catalog import Catalog
from agentchat.catalog_source import CatalogSource
from agentchat.errors import AgentChatError, ErrorCode, error_body
from agentchat.tool_request import InvalidArguments, validate_arguments
from agentchat.words import Lang, pick

PREFETCH_NAME = "prefetch"
CONFIRM_NAMESPACE = uuid.UUID("6f1c2d4e-8a57-4b1e-9d62-5c0e3f7a9b10")
IDEMPOTENCY_NAMESPACE = uuid.UUID("0b7f3e2a-51c4-4d8e-a6f9-2e3c7d1b5a84")
REFUSED = "refused"  # a decision taken before the sidecar: nothing is sent
UNTRUSTED_CARD = "confirmation_required_untrusted"
EXPIRED = "not run: the confirmation expired"
TRACER = trace.get_tracer("agentchat.agent")


def merge_messages(left: Any, right: Any) -> Any:
    """`add_messages`, except that removing a message the thread does not have is a no-op.

    A replica killed after a step's task finished but before its checkpoint was saved leaves
    that task's messages in the live state LangGraph shows (`aget_state`), not in the saved
    one. A `retry` removes what followed the user's message, those included: add_messages
    raised, the failed write was stored, and every later read of the thread raised again (the
    fault soak lost 24 conversations so)."""
    if isinstance(right, list) and any(isinstance(m, RemoveMessage) for m in right):
        known = {getattr(m, "id", None) for m in (left if isinstance(left, list) else [left])}
        right = [m for m in right if not (isinstance(m, RemoveMessage)
                                          and m.id != REMOVE_ALL_MESSAGES
                                          and m.id not in known)]
    return add_messages(left, right)


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], merge_messages]
    decisions: dict[str, dict[str, Any]]  # call_id -> the sidecar's decision
    approved: list[str]                   # call ids the tools node runs
    approved_keys: dict[str, str]         # call_id -> Idempotency-Key (confirm_id if carded)
    approved_decisions: dict[str, str]    # call_id -> decision_id in force (a re-check's)
    approved_revisions: dict[str, str]    # call_id -> the catalog revision it was judged under
    halt: dict[str, Any] | None           # an error that ends the turn (FORBIDDEN)
    # Written by versions before issue 31 (untrusted per turn); read by none: the taint is
    # the context's (agent/graph/taint.py).
    untrusted: bool


@dataclass(frozen=True)
class TurnRuntime:
    """Per-turn context (LangGraph runtime context: never checkpointed)."""

    conversation_id: str
    user_jwt: str
    tools: list[str]  # offered to the model this turn; a call to any other is refused
    turn: TurnContext = field(default_factory=TurnContext)
    prefetch: list[dict[str, Any]] = field(default_factory=list)
    confirmation_ttl_s: float = 300.0
    turn_id: str = ""
    lang: Lang = "ru"  # the turn's language (agentchat.words), kept in the turn's plan
    # Where the model node's text goes: the turn's own queue (agent/chat/turns.py), or, unset,
    # the graph's custom stream. LangGraph's stream costs a call_soon_threadsafe (a self-pipe
    # write) and a waiter task per write, and the text is per model token (issue 21).
    text_out: Callable[[dict[str, Any]], None] | None = None


@dataclass
class GraphDeps:
    catalogs: CatalogSource
    llm: BaseChatModel
    policy: PolicyClient
    tools: ToolRuntime
    audit: AuditTrail | None = None  # None: no trail (AGENTCHAT_AGENT_AUDIT=false)

    @property
    def catalog(self) -> Catalog:
        """The catalog as now (it reloads); a gate and its call use one revision, read once."""
        return self.catalogs.current()


def confirm_id_for(conversation_id: str, call_id: str) -> str:
    """Stable across re-runs of the confirm node, unique across conversations."""
    return str(uuid.uuid5(CONFIRM_NAMESPACE, f"{conversation_id}:{call_id}"))


def idempotency_key_for(conversation_id: str, turn_id: str, call_id: str) -> str:
    """The key of an uncarded write: namespaced, so two turns' `call_0` never collide."""
    return str(uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{conversation_id}:{turn_id}:{call_id}"))


def _refused(detail: str) -> dict[str, Any]:
    return {"decision": REFUSED, "reason_code": INVALID_ARGUMENTS, "detail": detail}


def with_unique_ids(response: AIMessage) -> tuple[AIMessage, dict[str, dict[str, Any]]]:
    """The model's message with each call's id replaced by `call_<message>_<n>` (unique within
    the conversation, under OpenAI's 40 characters), and calls whose arguments were not even
    JSON kept as refused calls, so each gets its ToolMessage."""
    mid = uuid.uuid4().hex[:16]
    calls: list[Any] = []
    refused: dict[str, dict[str, Any]] = {}
    for call in response.tool_calls:
        calls.append({**call, "id": f"call_{mid}_{len(calls)}", "type": "tool_call"})
    for bad in response.invalid_tool_calls:
        cid = f"call_{mid}_{len(calls)}"
        calls.append({"name": str(bad.get("name") or "unknown"), "args": {}, "id": cid,
                      "type": "tool_call"})
        refused[cid] = _refused("the arguments are not a JSON object")
    if not calls:
        return response, {}
    kwargs = {k: v for k, v in response.additional_kwargs.items() if k != "tool_calls"}
    return response.model_copy(update={"tool_calls": calls, "invalid_tool_calls": [],
                                       "additional_kwargs": kwargs}), refused


def tool_schemas(catalog: Catalog, names: list[str], lang: Lang = "ru") -> list[dict[str, Any]]:
    """The offered tools as the model gets them: the title and description in the turn's
    language (so the model names the action by its title, in that language)."""
    out = []
    for name in names:
        tool = catalog.get(name)
        if tool is not None:
            out.append({"type": "function", "function": {
                "name": tool.name,
                "description": f"{tool.title_in(lang)}: {tool.description_in(lang)}",
                "parameters": tool.args}})
    return out


def localized_alternatives(catalog: Catalog, tool: str, offered: Any,
                           lang: Lang) -> list[dict[str, str]]:
    """The sidecar's alternatives (the actions this user may run, its words Russian) in the
    turn's language: the catalog's words for the same action; an action the catalog does
    not list for the tool is dropped (its words would be the sidecar's, not ours)."""
    known = catalog.get(tool)
    words = {a.action: (a.prompt.ru if lang == "ru" else a.prompt.en)
             for a in (known.alternatives if known else [])}
    out = []
    for alt in offered or []:
        action = alt.get("action") if isinstance(alt, dict) else None
        if isinstance(action, str) and action in words:
            out.append({"action": action, "prompt": words[action]})
    return out


def _last_ai(state: AgentState) -> AIMessage | None:
    for m in reversed(state.get("messages", [])):
        if isinstance(m, AIMessage):
            return m
    return None


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
        response, refused = with_unique_ids(response)
        return {"messages": [response], "decisions": refused, "approved": [],
                "approved_keys": {}}

    async def policy(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        ai = _last_ai(state)
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
        if d.get("decision_id"):  # the sidecar answered (a refusal of its own included)
            out.append(ref.entry("decision", decision_detail(d, kind="check", taint=taint)))
        if d.get("decision") == REFUSED:
            out.append(ref.entry("not_run", {"reason": "refused",
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
            return _refused(f"the tool {call['name']!r} was not offered in this turn")
        try:
            args = validate_arguments(tool, call["args"])
        except InvalidArguments as e:
            return _refused(f"invalid arguments: {e}")
        d = await self.deps.policy.check_call(user_jwt=ctx.user_jwt, tool=tool, arguments=args,
                                              untrusted=taint is not None,
                                              catalog_revision=catalog.revision)
        if d.get("decision") == "deny" and d.get("reason_code") == INVALID_ARGUMENTS:
            return _refused(f"invalid arguments: {d.get('detail') or 'refused by the policy'}")
        if taint is not None and tool.risk != "read" and d.get("decision") == "allow":
            # The agent's own rule, whatever the policy's lines say (issue 31): text from
            # outside the user's words may have asked for this call.
            d = {**d, "decision": "allow_with_confirmation", "confirmation_required": True,
                 "reason_code": UNTRUSTED_CARD}
        if d.get("reason_code") == UNTRUSTED_CARD:
            d = {**d, "untrusted_source": taint}
        return d

    async def confirm(self, state: AgentState, runtime: Runtime[TurnRuntime]) -> Command[
            Literal["tools", "model"]]:
        ai = _last_ai(state)
        assert ai is not None
        # Ended by the card's interrupt on every pass but the last: not an error.
        with TRACER.start_as_current_span("agentchat.graph.confirm", record_exception=False,
                                          set_status_on_exception=False):
            return await self._confirm(ai, state, runtime.context)

    async def _confirm(self, ai: AIMessage, state: AgentState, ctx: TurnRuntime) -> Command[
            Literal["tools", "model"]]:
        verdicts = _Verdicts()
        words = _CardWords(self.deps.catalog, ctx,
                           known_names(state.get("messages", []), self.deps.catalog, ctx.lang))
        for call in ai.tool_calls:
            if verdicts.expired:  # no more cards once one expired
                verdicts.refuse(call, EXPIRED, "expired")
                continue
            decision = state.get("decisions", {}).get(call["id"] or "", {})
            _confirm_call(call, decision, words, verdicts)
        if verdicts.expired:
            expired = _Verdicts()
            for call in ai.tool_calls:
                expired.refuse(call, EXPIRED, "expired")
            verdicts = expired
        # The last pass (no card left to ask): why each refused call does not run, once.
        await self._audit_refusals(ctx, ai, verdicts)
        goto: Literal["tools", "model"] = "tools" if verdicts.approved else "model"
        return Command(goto=goto, update={"approved": verdicts.approved,
                                          "approved_keys": verdicts.keys,
                                          "approved_decisions": verdicts.decision_ids,
                                          "approved_revisions": verdicts.revisions,
                                          "messages": verdicts.refused})

    async def _audit_refusals(self, ctx: TurnRuntime, ai: AIMessage,
                              verdicts: _Verdicts) -> None:
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
            Literal["model", "__end__"]]:
        ai = _last_ai(state)
        assert ai is not None
        with TRACER.start_as_current_span("agentchat.graph.tools", attributes={
                "agentchat.calls": len(state.get("approved", []))}):
            return await self._tools(ai, state, runtime.context)

    async def _tools(self, ai: AIMessage, state: AgentState, ctx: TurnRuntime) -> Command[
            Literal["model", "__end__"]]:
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
                results.append(_refusal(call, "not run: the ss-tools API refused this turn"))
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
        goto: Literal["model", "__end__"] = "__end__" if halt else "model"
        return Command(goto=goto,
                       update={"messages": results, "approved": [], "halt": halt})

    async def _catalog_changed(self, ctx: TurnRuntime, call: Any,
                               writer: Callable[[Any], None]) -> ToolMessage:
        text = "not run: the tool catalog changed after this call was checked; ask again"
        title = tool_title(self.deps.catalog, call["name"], ctx.lang)
        writer({"type": "tool_start", "tool": call["name"], "title": title,
                "call_id": call["id"], "input": call["args"]})
        writer(refusal_event(call["name"], call["id"] or "", text, title, CATALOG_CHANGED))
        await self._audit(ctx, call, "not_run", {"reason": "policy_unavailable",
                                                 "detail": "catalog_changed"})
        return _refusal(call, text)

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


def start(state: AgentState, runtime: Runtime[TurnRuntime]) -> str:
    return "prefetch" if runtime.context.prefetch else "model"


def after_model(state: AgentState) -> str:
    ai = _last_ai(state)
    return "policy" if ai is not None and ai.tool_calls else END


def build_graph(deps: GraphDeps) -> StateGraph[AgentState, TurnRuntime, AgentState, AgentState]:
    nodes = Nodes(deps)
    g = StateGraph(AgentState, context_schema=TurnRuntime)
    g.add_node("prefetch", nodes.prefetch)
    g.add_node("model", nodes.model)
    g.add_node("policy", nodes.policy)
    g.add_node("confirm", nodes.confirm)
    g.add_node("tools", nodes.tools)
    g.add_conditional_edges(START, start, ["prefetch", "model"])
    g.add_edge("prefetch", "policy")
    g.add_conditional_edges("model", after_model, ["policy", END])
    g.add_edge("policy", "confirm")
    return g


# --- the confirm node's steps --------------------------------------------------------------

@dataclass
class _Verdicts:
    """What the confirm node decided so far: the calls to run (with their keys), the
    ToolMessages of the others, and whether a card expired (then nothing runs)."""

    approved: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # call_id -> Idempotency-Key
    decision_ids: dict[str, str] = field(default_factory=dict)  # call_id -> decision in force
    revisions: dict[str, str] = field(default_factory=dict)  # call_id -> catalog revision judged
    refused: list[ToolMessage] = field(default_factory=list)
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)  # the audit's words
    expired: bool = False

    def approve(self, call_id: str, key: str, decision: dict[str, Any]) -> None:
        """`decision`: the one in force (a confirmed card's re-check, else the check)."""
        self.approved.append(call_id)
        self.keys[call_id] = key
        if isinstance(decision.get("decision_id"), str):
            self.decision_ids[call_id] = decision["decision_id"]
        if isinstance(decision.get("catalog_revision"), str):
            self.revisions[call_id] = decision["catalog_revision"]

    def refuse(self, call: Any, text: str, reason: str,
               message: ToolMessage | None = None) -> None:
        self.refused.append(message or _refusal(call, text))
        self.reasons[call["id"] or ""] = (reason, text)


@dataclass(frozen=True)
class _CardWords:
    """What a card's words come from: the catalog, the turn (its language, UIContext), and
    the object names the thread's ss-tools results carry."""

    catalog: Catalog
    ctx: TurnRuntime
    names: dict[tuple[str, str], str]

    def prompt(self, call: Any, d: dict[str, Any], granted: bool) -> str:
        lang, tool = self.ctx.lang, self.catalog.get(call["name"])
        if tool is None:  # the policy node refuses these; never a card, but never raw words
            return pick(lang, "Подтвердить неизвестное действие?", "Confirm an unknown action?")
        if granted:
            names = names_for_call(call["args"], self.names, self.ctx.turn.uicontext)
            return tool.card_prompt(call["args"], lang, names)
        env = d.get("env_context")
        where = "" if not env or env not in self.catalog.environments else (
            pick(lang, f" в {env}", f" in {env}"))
        role = str(d.get("required_role") or "")
        role = role if role.replace("-", "").replace("_", "").isalnum() else ""
        need = pick(lang, f": нужна роль {role}", f": it needs the {role} role") if role else ""
        return pick(lang, f"Недостаточно прав на «{tool.title.ru}»{where}{need}.",
                    f"You may not run “{tool.title.en}”{where}{need}.")

    def alternatives(self, call: Any, d: dict[str, Any]) -> list[dict[str, str]]:
        return localized_alternatives(self.catalog, call["name"], d.get("alternatives"),
                                      self.ctx.lang)


def _confirm_call(call: Any, d: dict[str, Any], words: _CardWords, out: _Verdicts) -> None:
    """One call: refused and allowed calls as decided; any other asks the user on a card."""
    ctx = words.ctx
    call_id = call["id"] or ""
    if d.get("decision") == REFUSED:
        out.refuse(call, f"not run: {d.get('detail')}", "refused")
        return
    if d.get("decision") == "allow":
        out.approve(call_id, idempotency_key_for(ctx.conversation_id, ctx.turn_id, call_id), d)
        return
    cid = confirm_id_for(ctx.conversation_id, call_id)
    asked = d
    d, result, in_force = _ask(cid, words, call, d)
    if d.get("decision") == "allow_with_confirmation" and result == "confirmed":
        out.approve(call_id, cid, in_force)
    elif result == "expired":
        out.refuse(call, EXPIRED, "expired")
        out.expired = True
    elif d.get("decision") == "deny":
        # A card the sidecar had allowed, denied by the re-check: the role went meanwhile.
        reason = "revoked" if asked.get("decision") != "deny" else "permission_denied"
        out.refuse(call, "not run: permission denied", reason,
                   _permission_denied(call, d, words))
    else:
        out.refuse(call, "not run: the user denied it", "denied")


def _ask(confirm_id: str, words: _CardWords, call: Any,
         d: dict[str, Any]) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """The card as an `interrupt()`: the decision (as rechecked), the user's answer, and the
    decision in force (the re-check's when there was one: its id goes to ss-tools)."""
    ctx = words.ctx
    with TRACER.start_as_current_span("agentchat.card", record_exception=False,
                                      set_status_on_exception=False, attributes={
            "agentchat.confirm_id": confirm_id, "agentchat.tool": call["name"],
            "agentchat.environment": str(d.get("env_context") or ""),
            "agentchat.permission_granted": d.get("decision") != "deny",
            "agentchat.turn_id": ctx.turn_id}) as span:
        # Raises on the first run (the card is shown; the span ends there); returns the
        # answer on resume.
        answer = interrupt(_card(confirm_id, words, call, d))
        result = answer.get("result") if isinstance(answer, dict) else None
        recheck = answer.get("recheck") if isinstance(answer, dict) else None
        span.set_attribute("agentchat.result", str(result))
    if isinstance(recheck, dict) and recheck.get("decision") == "deny":
        # Confirmed, but the sidecar asked again with the user's current token said no.
        return recheck, "denied", recheck
    return d, result, recheck if isinstance(recheck, dict) else d


def _permission_denied(call: Any, d: dict[str, Any], words: _CardWords) -> ToolMessage:
    return own_result(json.dumps({"permission_denied": True,
                                  "required_role": d.get("required_role"),
                                  "alternatives": words.alternatives(call, d)},
                                 ensure_ascii=False),
                      tool_call_id=call["id"] or "", name=call["name"])


def _refusal(call: Any, text: str) -> ToolMessage:
    return own_result(text, tool_call_id=call["id"] or "", name=call["name"])


def _card(confirm_id: str, words: _CardWords, call: Any, d: dict[str, Any]) -> dict[str, Any]:
    ctx = words.ctx
    granted = d.get("decision") != "deny"
    expires = datetime.now(UTC) + timedelta(seconds=ctx.confirmation_ttl_s)
    tool, env = call["name"], d.get("env_context")
    return {
        "type": "confirm_required",
        "confirm_id": confirm_id,
        "thread_id": ctx.conversation_id,
        "call_id": call["id"],
        "tool_name": tool,
        "title": tool_title(words.catalog, tool, ctx.lang),
        "tool_args": call["args"],
        "risk": d.get("risk"),
        "risk_level": d.get("risk_level"),
        "dangerous": bool(d.get("dangerous")),
        "env_context": env,
        "permission_granted": granted,
        "required_role": None if granted else d.get("required_role"),
        "alternatives": None if granted else words.alternatives(call, d),
        # What the owner approves: the catalog's words, the validated arguments, quoted names.
        "prompt": words.prompt(call, d, granted),
        # Why a card: `confirmation_required`, `confirmation_required_untrusted` (text from
        # outside the user's words is in the model's context), or the denial's reason; for
        # an untrusted one, `reason` says so in the turn's language.
        "reason_code": d.get("reason_code"),
        "reason": taint_reason(d.get("untrusted_source"), ctx.lang)
        if d.get("reason_code") == UNTRUSTED_CARD else None,
        "expires_at": expires.isoformat(),
    }
