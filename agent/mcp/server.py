"""The MCP server on the SDK's low-level `Server`: `tools/list` and `tools/call` through the
chat domain's `GatedCalls` door, for the caller the guard verified (guard.py), in both
protocol eras (the SDK answers `initialize` and `server/discover` itself).

Elicitation: a 2026-07-28 client that declares it (its request's `_meta` capabilities) gets
the card asked inline as an `InputRequiredResult`; a handshake-era client has no way to answer
on a stateless endpoint (the SDK's stateless transport has no back channel for
`elicitation/create`), so its cards are answered by its person on the page (Pending), as for
any client that declares no elicitation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentchat.agent.chat import Caller
from agentchat.agent.mcp.guard import SCOPE_KEY, CallerContext
from agentchat.agent.mcp.results import answer_of, outcome_result, refusal, status_result
from agentchat.agent.mcp.tools import RESULT_TOOL, tool_list
from agentchat.agent.wiring import ServiceHolder
from agentchat.errors import AgentChatError, ErrorCode

log = logging.getLogger("agentchat.agent.mcp")

INSTRUCTIONS = ("ss-tools (Superset dashboards, datasets, migrations, maintenance windows) "
                "through AgentChat's gate: every call is checked by policy and audited; a "
                "write may need a person's confirmation or someone else's approval, answered "
                "inline or on the page the result names (`agentchat_call_result` then tells "
                "what became of the call).")


def caller_of(ctx: ServerRequestContext[Any, Any]) -> tuple[Caller, CallerContext]:
    """The domain's Caller from what the guard verified and what the client says of itself
    (its `clientInfo`, else its User-Agent: unverified either way)."""
    request = ctx.request
    seen = request.scope.get(SCOPE_KEY) if request is not None else None
    if not isinstance(seen, CallerContext) or seen.user_jwt is None:
        # The guard runs in front of every request; this is a wiring fault, not the caller's.
        raise MCPError(code=types.INTERNAL_ERROR, message="the caller was not verified")
    info = ctx.session.client_params.client_info if ctx.session.client_params else None
    claims = seen.principal.claims
    azp = claims.get("azp") or claims.get("client_id")
    caller = Caller(sub=seen.principal.sub, user_jwt=seen.user_jwt,
                    azp=str(azp)[:200] if azp else None,
                    client_name=(info.name if info else seen.user_agent or None),
                    client_version=info.version if info else None, lang=seen.lang)
    return caller, seen


def can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Only a 2026-07-28 client declaring form elicitation can answer inline here."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = ctx.session.client_capabilities
    elicit = caps.elicitation if caps is not None else None
    return elicit is not None and (elicit.form is not None or elicit.url is None)


def build_server(holder: ServiceHolder, version: str) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        caller, seen = caller_of(ctx)
        try:
            tools = await holder.get().gated_calls.tools_for(caller)
        except AgentChatError as e:
            raise MCPError(code=types.INTERNAL_ERROR, message=e.detail,
                           data={"code": str(e.code)}) from None
        return tool_list(tools, seen.lang)

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams,
                        ) -> types.CallToolResult | types.InputRequiredResult:
        caller, seen = caller_of(ctx)
        version = ctx.protocol_version
        calls = holder.get().gated_calls
        arguments = params.arguments or {}
        try:
            if params.name == RESULT_TOOL:
                call_id = arguments.get("call_id")
                if not isinstance(call_id, str) or not call_id or set(arguments) != {"call_id"}:
                    raise AgentChatError(ErrorCode.INVALID_REQUEST,
                                         "agentchat_call_result takes {call_id} only")
                return status_result(await calls.result(caller.sub, call_id), version)
            retry = params.request_state is not None
            outcome = await calls.call(
                caller, params.name, arguments, can_elicit=can_elicit(ctx),
                request_state=params.request_state,
                confirm=answer_of(params.input_responses) if retry else None)
        except AgentChatError as e:
            return refusal(e, version)
        return outcome_result(outcome, version=version, lang=seen.lang)

    def input_schema(name: str) -> Mapping[str, Any] | None:
        # The SDK checks a 2026-07-28 call's `Mcp-Param-*` headers against the tool's schema;
        # without this it would list the caller's tools (the sidecar asked) on every call.
        tool = holder.get().catalogs.current().get(name)
        return tool.args if tool is not None else None

    return Server("agentchat", version=version, title="AgentChat",
                  description="ss-tools through the gate", instructions=INSTRUCTIONS,
                  get_tool_input_schema=input_schema, on_list_tools=list_tools,
                  on_call_tool=call_tool)
