"""The graph's state and what a turn brings to it: the checkpointed `AgentState` (with its
message reducer), the per-turn `TurnRuntime` (LangGraph's runtime context, never
checkpointed), the graph's dependencies, and the stable ids a call's card and request use.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import TypedDict

from agentchat.agent.audit.trail import AuditTrail
from agentchat.agent.gate.checks import Gate
from agentchat.agent.gate.execution import Execution
from agentchat.agent.graph.prompt import TurnContext
from agentchat.catalog import Catalog
from agentchat.catalog_source import CatalogSource
from agentchat.words import Lang

PREFETCH_NAME = "prefetch"
CONFIRM_NAMESPACE = uuid.UUID("6f1c2d4e-8a57-4b1e-9d62-5c0e3f7a9b10")
IDEMPOTENCY_NAMESPACE = uuid.UUID("0b7f3e2a-51c4-4d8e-a6f9-2e3c7d1b5a84")
EXPIRED = "not run: the confirmation expired"


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
    # Set by the confirm node when someone else's approval answered a card of this pass:
    # after its calls the model answers without tools (the approver's token serves only
    # those calls, docs/protocol.md §11).
    answer_only: bool
    # Written by versions whose taint was per turn (not across turns); read by none: the taint is
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
    branch: str | None = None  # the turn's branch (docs/protocol.md §4), kept in the plan; audited
    # False when `user_jwt` is not the requester's (an approver's, docs/protocol.md §11): the
    # run never keeps it for a takeover (`runs.resume_token`).
    keep_token: bool = True
    # Where the model node's text goes: the turn's own queue (agent/chat/turn_task.py), or, unset,
    # the graph's custom stream. LangGraph's stream costs a call_soon_threadsafe (a self-pipe
    # write) and a waiter task per write, and the text is per model token (docs/architecture.md,
    # "Streaming at scale").
    text_out: Callable[[dict[str, Any]], None] | None = None


@dataclass
class GraphDeps:
    catalogs: CatalogSource
    llm: BaseChatModel
    gate: Gate  # the checks (agent/gate/checks.py), shared with the MCP calls
    execution: Execution  # a judged call run once, with its execution row
    audit: AuditTrail | None = None  # None: no trail (AGENTCHAT_AGENT_AUDIT=false)
    # docs/protocol.md §11: the live time-boxed grant covering a call of the conversation's owner
    # (conversation_id, tool, environment, object key) -> grant id; None: no grants.
    grants: Callable[[str, str, str | None, str], Awaitable[str | None]] | None = None

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


def last_ai(state: AgentState) -> AIMessage | None:
    for m in reversed(state.get("messages", [])):
        if isinstance(m, AIMessage):
            return m
    return None
