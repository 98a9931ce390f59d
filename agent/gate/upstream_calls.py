"""One call of an upstream MCP tool (a catalog tool with `upstream`), as ToolRuntime runs an
ss-tools one: the same events (docs/protocol.md §2), outcome and audit row.

- Right before sending, the pins (agent/gate/upstream_pins.py) must still allow the tool: a
  definition that drifted from its pin is refused, `tool_definition_changed`, nothing sent.
- What is sent is exactly the arguments the gate validated, less the environment argument(s),
  which pick the upstream's URL in the catalog (no URL for it: `upstream_not_configured`).
- A write is sent once: MCP has no Idempotency-Key, so nothing is resent automatically. A
  write that timed out (the upstream's `timeout_s`, connecting included) or whose answer never
  came has an unknown outcome: `tool_timeout {outcome: "unknown"}` or `tool_error`, and the
  audit's execution row says `unknown`. A read may be sent again once after a connection
  failure (`tool_retry`).
- The result is untrusted (its ToolMessage taints the context like any tool result,
  agent/graph/taint.py), text and JSON only (`structuredContent` preferred; any other block
  by type and size), at most `max_result_bytes` (else `result_too_large`), then trimmed for
  the model and the card.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

import anyio
import jwt
import mcp_types as types

from agentchat.agent.gate.tool_runtime import Emit, ToolOutcome, refusal_event, trim
from agentchat.agent.gate.upstream_client import (
    ERROR,
    NOT_CONFIGURED,
    TOO_LARGE,
    UNAVAILABLE,
    ResultTooLarge,
    UpstreamClients,
    UpstreamFailure,
    UpstreamSession,
)
from agentchat.agent.gate.upstream_pins import CHANGED_TEXT, DEFINITION_CHANGED
from agentchat.agent.storage.fencing import current
from agentchat.catalog import Catalog, Tool
from agentchat.errors import ErrorCode

ERROR_TEXT_CHARS = 500
BACKOFF_S = 0.5  # before a read's second attempt


class Pins(Protocol):
    """What a call asks the pins (agent/gate/upstream_pins.py) right before it is sent."""

    async def allows(self, tool: Tool) -> bool: ...


def result_json(result: types.CallToolResult, max_bytes: int) -> Any:
    """What an upstream's answer becomes for the model: its `structuredContent` when it has
    one; else the JSON object its one text block holds (Superset 6.1 answers so: a listing
    then keeps whole entries when trimmed); else `{"content": [...]}` of its text blocks,
    every other block by type and size (`{"type": "image", "mimeType": …, "bytes": N}`).
    Over `max_bytes` of JSON (UTF-8): ResultTooLarge."""
    if result.structured_content is not None:
        value: Any = result.structured_content
    else:
        value = json_text(result.content)
        if value is None:
            value = {"content": [block_json(b) for b in result.content]}
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > max_bytes:
        raise ResultTooLarge(f"the upstream's result is {size} bytes, over {max_bytes}")
    return value


def json_text(content: list[types.ContentBlock]) -> dict[str, Any] | None:
    """The object a result's only block holds as JSON text, or None (still untrusted data:
    parsed, never followed; linear in its size, which the transport already capped)."""
    if len(content) != 1 or not isinstance(content[0], types.TextContent):
        return None
    try:
        value = json.loads(content[0].text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def block_json(block: types.ContentBlock) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": block.type, "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        return {"type": block.type, "mimeType": block.mime_type, "bytes": b64_size(block.data)}
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        size = (len(res.text.encode("utf-8")) if isinstance(res, types.TextResourceContents)
                else b64_size(res.blob))
        return {"type": block.type, "mimeType": res.mime_type, "bytes": size}
    return {"type": block.type, "mimeType": block.mime_type, "bytes": block.size}


def b64_size(data: str) -> int:
    """The size base64 text decodes to, without decoding it."""
    return len(data.rstrip("=")) * 3 // 4


def error_text(result: types.CallToolResult) -> str:
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    text = " ".join(texts) or json.dumps(result.structured_content, ensure_ascii=False)
    return text[:ERROR_TEXT_CHARS]


def user_of(user_jwt: str) -> str | None:
    """The caller's id from their token, verified before the gate was reached: the audit and
    a signed JWT's user claim name them (the upstream itself runs as one account)."""
    try:
        sub = jwt.decode(user_jwt, options={"verify_signature": False}).get("sub")
    except jwt.PyJWTError:
        return None
    return str(sub) if sub else None


class UpstreamCalls:
    def __init__(self, clients: UpstreamClients, *, pins: Pins | None, max_result_bytes: int,
                 max_output_chars: int, backoff_s: float = BACKOFF_S) -> None:
        self.clients = clients
        self.pins = pins
        self.max_result_bytes = max_result_bytes
        self.max_output_chars = max_output_chars
        self.backoff_s = backoff_s

    async def run(self, *, catalog: Catalog, tool: Tool, call_id: str, args: dict[str, Any],
                  user_jwt: str, emit: Emit, title: str) -> ToolOutcome:
        """The call after its tool_start (ToolRuntime emitted it)."""
        ref = tool.upstream
        assert ref is not None
        env = tool.environments_of(args)[0]
        user = user_of(user_jwt)
        about = {"server": ref.server, "tool": ref.tool, "user": user}
        upstream = catalog.upstreams.get(ref.server)
        if self.pins is not None and not await self.pins.allows(tool):
            emit(refusal_event(tool.name, call_id, CHANGED_TEXT, title, DEFINITION_CHANGED))
            return ToolOutcome("refused", error=CHANGED_TEXT, attempts=0, upstream=about)
        if upstream is None or (env is not None and env not in upstream.url):
            error = f"not run: {ref.server!r} has no URL for {env!r}"
            emit(refusal_event(tool.name, call_id, error, title, NOT_CONFIGURED))
            return ToolOutcome("refused", error=error, attempts=0, upstream=about)
        sent = {k: v for k, v in args.items() if k not in tool.environment_arguments()}
        write = tool.risk != "read"
        max_attempts = 1 if write else 2
        deadline = time.monotonic() + upstream.timeout_s
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            # A replica paused after its run was taken over must not send it.
            await current().verify()
            opened: list[UpstreamSession] = []
            result: types.CallToolResult | None = None
            try:
                with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                    async with self.clients.open(catalog, ref.server, env, user=user) as s:
                        opened.append(s)
                        result = await s.call(ref.tool, sent)
                failure = None
            except TimeoutError:
                failure = UpstreamFailure("timeout", "timed out", outcome="unknown" if opened
                                          and opened[0].meter.call_sent else "not_run")
            except UpstreamFailure as e:
                failure = e
            if failure is None and result is not None and result.is_error:
                failure = UpstreamFailure(ERROR, "the upstream answered an error: "
                                          + error_text(result), outcome="answered")
            if failure is None and result is not None:
                try:
                    output = trim(result_json(result, self.max_result_bytes),
                                  self.max_output_chars)
                except ResultTooLarge as e:
                    failure = UpstreamFailure(TOO_LARGE, str(e), outcome="answered")
                else:
                    emit({"type": "tool_end", "tool": tool.name, "title": title,
                          "call_id": call_id, "output": output,
                          "duration_ms": int((time.monotonic() - started) * 1000)})
                    return ToolOutcome("ok", output=output, attempts=attempt, upstream=about)
            assert failure is not None
            unsure = failure.outcome == "unknown"
            if failure.reason == "timeout":
                emit({"type": "tool_timeout", "tool": tool.name, "title": title,
                      "call_id": call_id, "timeout_seconds": upstream.timeout_s,
                      "retryable": not (write and unsure), "outcome": failure.outcome})
                status = "unknown" if write and unsure else "timeout"
                return ToolOutcome(status, error=f"timed out after {upstream.timeout_s:g} s"
                                   + (": it may have run" if unsure else ""),
                                   attempts=attempt, upstream=about)
            # A read is harmless to send again; a write never is.
            retry = not write and attempt < max_attempts and (failure.reason == UNAVAILABLE
                                                               or unsure)
            if retry and time.monotonic() + self.backoff_s < deadline:
                emit({"type": "tool_retry", "tool": tool.name, "title": title,
                      "call_id": call_id, "attempt": attempt, "max_attempts": max_attempts})
                await anyio.sleep(self.backoff_s)
                continue
            # The reason leads the text: it is what the model reads of the failure.
            error = f"{failure.reason}: {failure.detail}"
            emit({"type": "tool_error", "tool": tool.name, "title": title, "call_id": call_id,
                  "error": error, "code": str(ErrorCode.TOOL_FAILURE),
                  "reason": failure.reason,
                  "retryable": failure.reason == UNAVAILABLE or (not write and unsure),
                  "retry_count": attempt, "retry_exhausted": attempt > 1, "timeout": False})
            return ToolOutcome("unknown" if write and unsure else "error",
                               error=error, attempts=attempt, upstream=about)
