"""The caller's tools as MCP tools (docs/protocol.md §12, "tools/list"): the catalog's schema
as `inputSchema`, its title and description in the request's language, annotations from the
tool's risk, in the catalog's order; and the gateway's own `agentchat_call_result`.

Annotations are hints a client may show or use to ask its person before a call; they never
replace the gate, which checks every call whatever the client did.
"""

from __future__ import annotations

from collections.abc import Iterable

import mcp_types as types

from agentchat.catalog import Tool
from agentchat.words import Lang

RESULT_TOOL = "agentchat_call_result"
# A list is private to its caller and short-lived: a policy or catalog reload shows within
# seconds on every replica (the 2026-07-28 `ttlMs`; older revisions drop the field).
LIST_TTL_MS = 5000

_RESULT_WORDS = {
    "en": ("Result of a call waiting for a person",
           "The status of a call this endpoint answered with `confirmation_required` or "
           "`approval_required` (its `call_id`): pending, running, done, denied, expired or "
           "failed, and its result once done. Only the call's requester learns it exists."),
    "ru": ("Результат вызова, ждущего человека",
           "Состояние вызова, на который этот сервер ответил `confirmation_required` или "
           "`approval_required` (его `call_id`): pending, running, done, denied, expired или "
           "failed, и его результат, когда он выполнен. Только автор вызова узнаёт, что он есть."),
}


def risk_hints(tool: Tool, lang: Lang) -> types.ToolAnnotations:
    title = getattr(tool.title, lang)
    if tool.risk == "read":
        return types.ToolAnnotations(title=title, read_only_hint=True, destructive_hint=False,
                                     open_world_hint=False)
    if tool.risk == "write":
        return types.ToolAnnotations(title=title, read_only_hint=False, destructive_hint=False,
                                     open_world_hint=False)
    return types.ToolAnnotations(title=title, read_only_hint=False, destructive_hint=True,
                                 open_world_hint=False)


def mcp_tool(tool: Tool, lang: Lang) -> types.Tool:
    return types.Tool(name=tool.name, title=getattr(tool.title, lang),
                      description=getattr(tool.description, lang), input_schema=tool.args,
                      annotations=risk_hints(tool, lang))


def result_tool(lang: Lang) -> types.Tool:
    title, description = _RESULT_WORDS[lang]
    return types.Tool(
        name=RESULT_TOOL, title=title, description=description,
        input_schema={"type": "object", "additionalProperties": False, "required": ["call_id"],
                      "properties": {"call_id": {"type": "string", "minLength": 1,
                                                 "maxLength": 128}}},
        annotations=types.ToolAnnotations(title=title, read_only_hint=True,
                                          destructive_hint=False, open_world_hint=False))


def tool_list(tools: Iterable[Tool], lang: Lang) -> types.ListToolsResult:
    """The caller's tools in the order given (the catalog's: stable), then the gateway's."""
    listed = [mcp_tool(t, lang) for t in tools]
    return types.ListToolsResult(tools=[*listed, result_tool(lang)], ttl_ms=LIST_TTL_MS,
                                 cache_scope="private")
