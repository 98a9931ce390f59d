"""The agent graph: model → policy → confirm → tools → model …

- `model` streams tokens (the only node whose tokens reach the user) and plans tool calls
  from the tools selected for this turn.
- `policy` asks the sidecar about every call of the model's message before any runs and keeps
  the decisions in the state, so a resumed run never asks again.
- `confirm` turns each decision that needs a human into an `interrupt()` whose value is the
  `confirm_required` card, one at a time and in order. It has no side effects before its
  interrupts: the node re-runs from its start on every resume.
- `tools` runs the approved calls through the tool runtime; refused ones already have their
  ToolMessage.
- `prefetch` (first, when the turn has prefetch calls) is an ordinary tool call made by the
  agent: it goes through policy, confirm and tools like any other.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from agentchat.agent.planner import context_message
from agentchat.agent.planner_rules import TurnContext
from agentchat.agent.policy_client import PolicyClient
from agentchat.agent.tool_runtime import ToolRuntime
from agentchat.catalog import Catalog
from agentchat.errors import AgentChatError, ErrorCode

PREFETCH_NAME = "prefetch"
CONFIRM_NAMESPACE = uuid.UUID("6f1c2d4e-8a57-4b1e-9d62-5c0e3f7a9b10")


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    decisions: dict[str, dict[str, Any]]  # call_id -> the sidecar's decision
    approved: list[str]                   # call ids the tools node runs
    approved_keys: dict[str, str]         # call_id -> Idempotency-Key (confirm_id if carded)
    halt: dict[str, Any] | None           # an error that ends the turn (FORBIDDEN)


@dataclass(frozen=True)
class TurnRuntime:
    """Per-turn context (LangGraph runtime context: never checkpointed)."""

    conversation_id: str
    user_jwt: str
    tools: list[str]
    turn: TurnContext = field(default_factory=TurnContext)
    prefetch: list[dict[str, Any]] = field(default_factory=list)
    confirmation_ttl_s: float = 300.0


@dataclass
class GraphDeps:
    catalog: Catalog
    llm: BaseChatModel
    policy: PolicyClient
    tools: ToolRuntime


def confirm_id_for(conversation_id: str, call_id: str) -> str:
    """Stable across re-runs of the confirm node, unique across conversations."""
    return str(uuid.uuid5(CONFIRM_NAMESPACE, f"{conversation_id}:{call_id}"))


def tool_schemas(catalog: Catalog, names: list[str]) -> list[dict[str, Any]]:
    out = []
    for name in names:
        tool = catalog.get(name)
        if tool is not None:
            out.append({"type": "function", "function": {
                "name": tool.name, "description": f"{tool.description.en} / {tool.description.ru}",
                "parameters": tool.args}})
    return out


def _last_ai(state: AgentState) -> AIMessage | None:
    for m in reversed(state.get("messages", [])):
        if isinstance(m, AIMessage):
            return m
    return None


def build_graph(deps: GraphDeps) -> StateGraph:
    async def prefetch(state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        calls = [{"name": c["name"], "args": c["args"], "id": c["id"], "type": "tool_call"}
                 for c in runtime.context.prefetch]
        # Named, so the model can tell the agent's own prefetch from calls it made itself.
        return {"messages": [AIMessage(content="", tool_calls=calls, name=PREFETCH_NAME)]}

    async def model(state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        ctx = runtime.context
        schemas = tool_schemas(deps.catalog, ctx.tools)
        llm = deps.llm.bind_tools(schemas) if schemas else deps.llm
        try:
            response = await llm.ainvoke([context_message(ctx.turn), *state["messages"]])
        except AgentChatError:
            raise
        except Exception as e:  # any failure of the endpoint: refused, 5xx, timeout, cut stream
            raise AgentChatError(ErrorCode.LLM_UNAVAILABLE,
                                 f"the model is unavailable ({type(e).__name__})") from None
        # Only tools offered this turn may be called; anything else is answered as refused.
        return {"messages": [response], "decisions": {}, "approved": [], "approved_keys": {}}

    async def policy(state: AgentState, runtime: Runtime[TurnRuntime]) -> dict[str, Any]:
        ai = _last_ai(state)
        assert ai is not None
        decisions: dict[str, dict[str, Any]] = {}
        for call in ai.tool_calls:
            tool = deps.catalog.get(call["name"])
            env = tool.environments_of(call["args"])[0] if tool else None
            decisions[call["id"] or ""] = await deps.policy.check(
                user_jwt=runtime.context.user_jwt, tool=call["name"], arguments=call["args"],
                environment=env)
        return {"decisions": decisions}

    async def confirm(state: AgentState, runtime: Runtime[TurnRuntime]) -> Command[
            Literal["tools", "model"]]:
        ai = _last_ai(state)
        assert ai is not None
        ctx = runtime.context
        approved: list[str] = []
        keys: dict[str, str] = {}
        refused: list[ToolMessage] = []
        stop_all = False
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            d = state.get("decisions", {}).get(call_id, {})
            if stop_all:
                refused.append(_refusal(call, "not run: the confirmation expired"))
                continue
            if d.get("decision") == "allow":
                approved.append(call_id)
                keys[call_id] = call_id
                continue
            cid = confirm_id_for(ctx.conversation_id, call_id)
            card = _card(cid, ctx, call, d)
            answer = interrupt(card)  # raises on first run; the answer on resume
            result = answer.get("result") if isinstance(answer, dict) else None
            if d.get("decision") == "allow_with_confirmation" and result == "confirmed":
                approved.append(call_id)
                keys[call_id] = cid
            elif result == "expired":
                refused.append(_refusal(call, "not run: the confirmation expired"))
                stop_all = True
            elif d.get("decision") == "deny":
                refused.append(ToolMessage(
                    content=json.dumps({"permission_denied": True,
                                        "required_role": d.get("required_role"),
                                        "alternatives": d.get("alternatives") or []},
                                       ensure_ascii=False),
                    tool_call_id=call_id, name=call["name"], status="error"))
            else:
                refused.append(_refusal(call, "not run: the user denied it"))
        if stop_all:
            approved, keys = [], {}
            refused = [_refusal(c, "not run: the confirmation expired") for c in ai.tool_calls]
        goto: Literal["tools", "model"] = "tools" if approved else "model"
        return Command(goto=goto, update={"approved": approved, "approved_keys": keys,
                                          "messages": refused})

    async def tools(state: AgentState, runtime: Runtime[TurnRuntime]) -> Command[
            Literal["model", "__end__"]]:
        ai = _last_ai(state)
        assert ai is not None
        writer = get_stream_writer()
        keys = state.get("approved_keys", {})
        results: list[ToolMessage] = []
        halt = None
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            if call_id not in state.get("approved", []):
                continue
            if halt is not None:
                results.append(_refusal(call, "not run: the ss-tools API refused this turn"))
                continue
            outcome = await deps.tools.run(
                tool_name=call["name"], call_id=call_id, args=call["args"],
                user_jwt=runtime.context.user_jwt, idempotency_key=keys.get(call_id), emit=writer)
            results.append(ToolMessage(content=outcome.message_text(), tool_call_id=call_id,
                                       name=call["name"],
                                       status="success" if outcome.status == "ok" else "error"))
            if outcome.status == "forbidden":
                halt = {"code": "FORBIDDEN", "detail": f"the ss-tools API refused {call['name']}"}
        return Command(goto=END if halt else "model",
                       update={"messages": results, "approved": [], "halt": halt})

    def after_model(state: AgentState) -> str:
        ai = _last_ai(state)
        return "policy" if ai is not None and ai.tool_calls else END

    def start(state: AgentState, runtime: Runtime[TurnRuntime]) -> str:
        return "prefetch" if runtime.context.prefetch else "model"

    g = StateGraph(AgentState, context_schema=TurnRuntime)
    g.add_node("prefetch", prefetch)
    g.add_node("model", model)
    g.add_node("policy", policy)
    g.add_node("confirm", confirm)
    g.add_node("tools", tools)
    g.add_conditional_edges(START, start, ["prefetch", "model"])
    g.add_edge("prefetch", "policy")
    g.add_conditional_edges("model", after_model, ["policy", END])
    g.add_edge("policy", "confirm")
    return g


def _refusal(call: Any, text: str) -> ToolMessage:
    return ToolMessage(content=text, tool_call_id=call["id"] or "", name=call["name"],
                       status="error")


def _card(confirm_id: str, ctx: TurnRuntime, call: Any, d: dict[str, Any]) -> dict[str, Any]:
    granted = d.get("decision") != "deny"
    expires = datetime.now(UTC) + timedelta(seconds=ctx.confirmation_ttl_s)
    tool, env = call["name"], d.get("env_context")
    prompt = (f"Подтвердить {tool} в {env}?" if granted
              else f"Недостаточно прав для {tool} в {env}")
    return {
        "type": "confirm_required",
        "confirm_id": confirm_id,
        "thread_id": ctx.conversation_id,
        "call_id": call["id"],
        "tool_name": tool,
        "tool_args": call["args"],
        "risk": d.get("risk"),
        "risk_level": d.get("risk_level"),
        "dangerous": bool(d.get("dangerous")),
        "env_context": env,
        "permission_granted": granted,
        "required_role": None if granted else d.get("required_role"),
        "alternatives": None if granted else (d.get("alternatives") or []),
        "prompt": prompt,
        "expires_at": expires.isoformat(),
    }
