"""The planned calls are durable before any write runs (docs/protocol.md §4, "Takeover").

Call ids, and so an uncarded write's Idempotency-Key, derive from the turn and the step
(graph/calls.py). The model node stores a step whose calls include a write, with the turn's
model steps before it, before the policy and tools nodes run (storage/turn_plans.py, fenced
by the run's epoch). A run that goes on with the turn (a takeover) meets the same
steps on its way and returns the stored message instead of asking the model, whose next
answer may order or argue its calls differently (new ids: the write would run twice).

Cost: a step without a write stores nothing, and a run that is not going on with an earlier
run's turn reads nothing, so a write-free turn makes no statement more; a step with a write
makes one (bench/fencing.py measures it); a taken-over run reads one row a step until a step
has none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    message_to_dict,
    messages_from_dict,
)

from agentchat.agent.graph.calls import refused_of
from agentchat.agent.graph.state import PREFETCH_NAME
from agentchat.agent.storage import turn_plans
from agentchat.agent.storage.fencing import current
from agentchat.catalog import Catalog

Step = tuple[AIMessage, dict[str, dict[str, Any]]]  # the message and its calls' refusals


def plans_a_write(catalog: Catalog, message: AIMessage) -> bool:
    """A call of a write or destructive tool (one the catalog does not know is refused: it
    never runs)."""
    for call in message.tool_calls:
        tool = catalog.get(call["name"])
        if tool is not None and tool.risk != "read":
            return True
    return False


def turn_steps(messages: Sequence[AnyMessage]) -> list[tuple[int, AIMessage]]:
    """The model's steps of the turn so far, by step (its position: the thread's length when
    the model was asked): the AI messages after the turn's user message, the prefetch's
    aside."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)),
                default=-1) + 1
    return [(i, m) for i, m in enumerate(messages[start:], start)
            if isinstance(m, AIMessage) and m.name != PREFETCH_NAME]


def restored(stored: dict[str, Any]) -> Step:
    message = messages_from_dict([stored])[0]
    assert isinstance(message, AIMessage), "only model steps are stored"
    return message, refused_of(message)


async def replayed(turn_id: str, messages: Sequence[AnyMessage],
                   write: Callable[[Any], None]) -> Step | None:
    """The step stored for this point of the turn by an earlier run of it, its text written
    again (the answer starts again on a takeover); None: ask the model."""
    fence = current()
    if not fence.replay or fence.db is None or not turn_id:
        return None
    fence.check()
    stored = await turn_plans.step(fence.db, turn_id, len(messages))
    if stored is None:
        # Steps are stored as the turn's path up to a write: none lies beyond a step without.
        fence.replay = False
        return None
    message, refused = restored(stored)
    if message.text:
        write({"type": "stream_token", "token": message.text})
    return message, refused


async def kept(catalog: Catalog, turn_id: str, messages: Sequence[AnyMessage],
               response: AIMessage, refused: dict[str, dict[str, Any]]) -> Step:
    """The model's new step, stored before anything of it runs when it plans a write; the
    step stored first when another attempt stored one (its plan is the step's)."""
    fence = current()
    if fence.db is None or not turn_id or not plans_a_write(catalog, response):
        return response, refused
    step = len(messages)
    steps = [(n, message_to_dict(m)) for n, m in turn_steps(messages)]
    steps.append((step, message_to_dict(response)))
    stored = await turn_plans.keep(fence, fence.db, turn_id, step, steps)
    return (response, refused) if stored is None else restored(stored)
