"""Branches in the graph's thread (docs/protocol.md §4, "Branches"). The thread's newest checkpoint
is always the active branch's: a fork copies the checkpoint just before the message it replaces as
the newest one (LangGraph's `__copy__`), then runs its turn from there; a branch switch copies that
branch's last checkpoint. So every other path (a message, a card's answer, a retry) goes on from the
thread's newest checkpoint, as it always did.

A checkpoint is found by the last user message in it (user message ids are our message ids,
unique per branch): the newest checkpoint whose last user message is M is the end of M's
branch. A thread compacted by the pruner (only linear ones are: operator/pruning.py) may
have lost the checkpoint before M; the fork then starts from one holding M and drops M and
everything after it, which is the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from agentchat.agent.graph.taint import own_result
from agentchat.errors import AgentChatError, ErrorCode

COPY = "__copy__"  # LangGraph's update that copies a checkpoint as the thread's newest
NOT_RUN = "not run: the conversation went back to an earlier message"


def last_user(messages: Sequence[BaseMessage]) -> str | None:
    return next((m.id for m in reversed(messages) if isinstance(m, HumanMessage)), None)


async def _newest(graph: CompiledStateGraph[Any, Any, Any, Any], config: RunnableConfig,
                  match: Callable[[list[BaseMessage]], bool]) -> tuple[Any, bool] | None:
    """The newest checkpoint whose messages match, and whether it is the thread's newest."""
    first = True
    async for snap in graph.aget_state_history(config):
        if match(list(snap.values.get("messages", []))):
            return snap, first
        first = False
    return None


async def fork_input(graph: CompiledStateGraph[Any, Any, Any, Any], config: RunnableConfig, *,
                     replaced: str, prev_user: str | None, human: HumanMessage) -> Any:
    """Make the state just before user message `replaced` (after `prev_user`'s turn, or
    before any) the thread's newest checkpoint; the graph input that runs `human` there."""
    found = None
    if prev_user is not None:
        found = await _newest(graph, config, lambda ms: last_user(ms) == prev_user)
    drop: list[str] = []
    if found is None:
        found = await _newest(graph, config, lambda ms: any(m.id == replaced for m in ms))
        if found is None:
            raise AgentChatError(ErrorCode.INVALID_REQUEST,
                                 "that message's saved state is gone; send it as a new one")
        ids = [str(m.id) for m in found[0].values.get("messages", [])]
        drop = ids[ids.index(replaced):]
    base = found[0]
    await graph.aupdate_state(base.config, None, as_node=COPY)
    kept = [m for m in base.values.get("messages", []) if str(m.id) not in drop]
    answered = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)}
    ai = next((m for m in reversed(kept) if isinstance(m, AIMessage)), None)
    # A call left without a result there (a card never answered) is answered: not run.
    patch = [own_result(NOT_RUN, tool_call_id=c["id"] or "", name=c["name"])
             for c in (ai.tool_calls if ai else []) if c["id"] not in answered]
    return {"messages": [*(RemoveMessage(id=i) for i in drop), *patch, human]}


async def show_branch(graph: CompiledStateGraph[Any, Any, Any, Any], config: RunnableConfig,
                      user_message: str | None) -> None:
    """Make the end of the branch whose last user message is `user_message` the thread's
    newest checkpoint (nothing to do when it already is, or when it has none)."""
    if user_message is None:
        return
    found = await _newest(graph, config, lambda ms: last_user(ms) == user_message)
    if found is not None and not found[1]:
        await graph.aupdate_state(found[0].config, None, as_node=COPY)
