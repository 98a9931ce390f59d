"""The names of the user's objects that the agent may show: a card prompt and the
offline model's answers name a dashboard by its title only when the agent has seen that title.

Names come only from (1) successful ss-tools results in the thread (the prefetch, earlier
calls), by the result's tool (its catalog path says which kind of object it returns) or by a
`<kind>_id` next to a `title`/`name`; (2) the UIContext's `objectName`, only for the object
whose `objectId` the call names. Everything else (the model's text, the message) never
becomes a name. A name is shown quoted and cut (agentchat.words.safe_name), never trusted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from agentchat.catalog import OBJECT_KINDS, Catalog
from agentchat.words import Lang

# The first segment of a tool's path after /api/ -> the kind of object its results list.
_PATH_KINDS = {"dashboards": "dashboard", "datasets": "dataset", "databases": "database"}
# Where each kind keeps its name; English turns prefer the `_en` field when there is one.
_NAME_FIELDS = {"dashboard": ("title", "dashboard_title"), "dataset": ("name",),
                "database": ("name",)}

Names = dict[tuple[str, str], str]  # (kind, str(id)) -> name


def kind_of_tool(catalog: Catalog | None, tool: str | None,
                 kinds: Mapping[str, str] | None = None) -> str | None:
    """The kind of object a tool's results list: by its catalog path, or from `kinds` (the
    offline model, which has no catalog, knows its tools by name)."""
    t = catalog.get(tool) if catalog is not None and tool else None
    if t is None:
        return (kinds or {}).get(tool or "")
    return _PATH_KINDS.get((t.path or "").removeprefix("/api/").split("/", 1)[0])


def _name_in(obj: Mapping[str, Any], kind: str, lang: Lang) -> str | None:
    for field in _NAME_FIELDS[kind]:
        if lang == "en" and isinstance(obj.get(field + "_en"), str) and obj[field + "_en"]:
            return str(obj[field + "_en"])
        if isinstance(obj.get(field), str) and obj[field]:
            return str(obj[field])
    return None


def _walk(value: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def names_in_result(data: Any, tool_kind: str | None, lang: Lang) -> Names:
    """The named objects of one tool result."""
    out: Names = {}
    for obj in _walk(data):
        for kind, id_field in OBJECT_KINDS.items():
            oid = obj.get(id_field)
            name = _name_in(obj, kind, lang)
            if oid is not None and name and not isinstance(oid, bool):
                out.setdefault((kind, str(oid)), name)
    if tool_kind is not None:
        # The tool's own objects: the result itself, or the entries of its listings; objects
        # nested deeper (a dashboard's datasets) are not of the tool's kind.
        own = [data] if isinstance(data, Mapping) else []
        own += [i for v in (data.values() if isinstance(data, Mapping) else [data])
                if isinstance(v, list) for i in v if isinstance(i, Mapping)]
        for obj in own:
            name = _name_in(obj, tool_kind, lang)
            if obj.get("id") is not None and name:
                out.setdefault((tool_kind, str(obj["id"])), name)
    return out


def tool_names_by_call(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """call id -> tool name, from the model's messages (a ToolMessage may lack its name)."""
    return {c["id"] or "": c["name"] for m in messages if isinstance(m, AIMessage)
            for c in m.tool_calls}


def known_names(messages: Sequence[BaseMessage], catalog: Catalog | None, lang: Lang,
                kinds: Mapping[str, str] | None = None) -> Names:
    """Every object name the thread's successful ss-tools results carry."""
    by_call = tool_names_by_call(messages)
    out: Names = {}
    for m in messages:
        if not isinstance(m, ToolMessage) or m.status == "error":
            continue
        try:
            data = json.loads(str(m.content))
        except ValueError:
            continue
        tool = m.name or by_call.get(m.tool_call_id)
        kind = kind_of_tool(catalog, tool, kinds)
        for key, name in names_in_result(data, kind, lang).items():
            out[key] = name  # the latest result wins: a title may have changed
    return out


def names_for_call(arguments: Mapping[str, Any], known: Names,
                   uicontext: Mapping[str, Any] | None) -> dict[str, str]:
    """kind -> name for the objects a call's arguments name (what `Tool.card_prompt` takes)."""
    out: dict[str, str] = {}
    ui = uicontext or {}
    for kind, id_field in OBJECT_KINDS.items():
        oid = arguments.get(id_field)
        if oid is None:
            continue
        name = known.get((kind, str(oid)))
        if name is None and ui.get("objectType") == kind and ui.get("objectId") is not None \
                and str(ui.get("objectId")) == str(oid) and isinstance(ui.get("objectName"), str):
            name = ui["objectName"]
        if name:
            out[kind] = name
    return out
