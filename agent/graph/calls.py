"""The model's calls as the gate sees them: unique ids, the offered tools' schemas in the
turn's language, and the sidecar's alternatives in the catalog's words."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage

from agentchat.agent.gate.checks import refused_call
from agentchat.catalog import Catalog
from agentchat.words import Lang

NOT_JSON = "the arguments are not a JSON object"
# The message's own record of its calls refused for NOT_JSON (its response_metadata, which no
# model is sent): a step replayed from turn_plans (graph/plans.py) refuses them again.
REFUSED_IDS = "agentchat_refused"


def refused_of(message: AIMessage) -> dict[str, dict[str, Any]]:
    """The decisions `with_unique_ids` made for `message`'s calls (its refusals)."""
    return {cid: refused_call(NOT_JSON)
            for cid in message.response_metadata.get(REFUSED_IDS) or []}


# Call ids of a turn's model messages: the same turn at the same step gets the same ids.
CALL_NAMESPACE = uuid.UUID("5b0c3f7e-8a41-4d55-9a53-0f2d6c1e7a90")


def with_unique_ids(response: AIMessage, step: str | None = None
                    ) -> tuple[AIMessage, dict[str, dict[str, Any]]]:
    """The model's message with each call's id replaced by `call_<message>_<n>` (unique within
    the conversation, under OpenAI's 40 characters), and calls whose arguments were not even
    JSON kept as refused calls, so each gets its ToolMessage. `step` (the turn's id and the
    thread's length) makes `<message>` the same when a run taken over by another replica
    (docs/protocol.md §4, "Takeover") makes the same calls again at the same step: an uncarded
    write's idempotency key (conversation, turn, call id) is then the same, and the write
    runs once."""
    mid = (uuid.uuid5(CALL_NAMESPACE, step) if step else uuid.uuid4()).hex[:16]
    calls: list[Any] = []
    refused: dict[str, dict[str, Any]] = {}
    for call in response.tool_calls:
        calls.append({**call, "id": f"call_{mid}_{len(calls)}", "type": "tool_call"})
    for bad in response.invalid_tool_calls:
        cid = f"call_{mid}_{len(calls)}"
        calls.append({"name": str(bad.get("name") or "unknown"), "args": {}, "id": cid,
                      "type": "tool_call"})
        refused[cid] = refused_call(NOT_JSON)
    if not calls:
        return response, {}
    kwargs = {k: v for k, v in response.additional_kwargs.items() if k != "tool_calls"}
    update: dict[str, Any] = {"tool_calls": calls, "invalid_tool_calls": [],
                              "additional_kwargs": kwargs}
    if refused:
        update["response_metadata"] = {**response.response_metadata, REFUSED_IDS: list(refused)}
    return response.model_copy(update=update), refused


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
