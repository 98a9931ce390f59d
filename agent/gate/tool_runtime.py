"""Running one catalog tool against the ss-tools API (docs/protocol.md §2, §7).

Both tokens on every call, `Idempotency-Key` on write and destructive calls, the tool's own
timeout (a timed-out attempt ends the call with `tool_timeout`, never retried), transient
failures (502, 503, 504, connection errors) retried after a 1 s backoff up to the tool's
`max_attempts` with `tool_retry`, then `tool_error`; other failures give `tool_error` at once.
Events go to `emit`, each with the tool's `title` in the turn's language (`tool` stays the
machine name); the outcome becomes the model's ToolMessage. The request is built by
`agentchat.tool_request.build_request` from the validated arguments only; a call it refuses
sends nothing and ends with `tool_error {reason: "invalid_arguments"}`. A catalog tool that
is another team's MCP tool (`upstream`) runs through `upstream` instead
(agent/gate/upstream_calls.py), with the same events.

Right before each attempt's request the run's epoch is read from PostgreSQL (never a cache;
agent/storage/fencing.py): a run another replica took over meanwhile sends nothing more and
stops (RunFenced). The call's `decision_id` (the sidecar's decision that let it run) goes with
every attempt as `X-Decision-Id`, so the ss-tools audit joins ours. A call is the span
`agentchat.tool`, each attempt `agentchat.tool.attempt` under it (tool, environment, attempt,
outcome; never argument values or tokens); TOOL_CALLS and TOOL_SECONDS count them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from agentchat.agent.gate.service_token import ServiceTokenProvider
from agentchat.agent.metrics import TOOL_CALLS, TOOL_SECONDS
from agentchat.agent.storage.fencing import current
from agentchat.catalog import Catalog, Tool
from agentchat.errors import ErrorCode
from agentchat.tool_request import InvalidArguments, build_request
from agentchat.words import Lang, pick

TRACER = trace.get_tracer("agentchat.agent")
TRANSIENT = {502, 503, 504}
INVALID_ARGUMENTS = "invalid_arguments"
CATALOG_CHANGED = "catalog_changed"
Emit = Callable[[dict[str, Any]], None]


def tool_title(catalog: Catalog, tool: str, lang: Lang) -> str:
    """The tool's title for people; a name the catalog does not know (a model's invention)
    is never shown: it could say anything."""
    known = catalog.get(tool)
    if known is None:
        return pick(lang, "Неизвестное действие", "Unknown action")
    return known.title_in(lang)


def refusal_event(tool: str, call_id: str, error: str, title: str,
                  reason: str = INVALID_ARGUMENTS) -> dict[str, Any]:
    """The one outcome of a call refused before anything was sent (docs/protocol.md §2): its
    arguments (`invalid_arguments`), the catalog changed after its check (`catalog_changed`,
    retryable: asked again, it is judged under the new revision), or an upstream tool's
    definition drifted from its pin or its upstream has no URL here
    (agent/gate/upstream_calls.py)."""
    return {"type": "tool_error", "tool": tool, "title": title, "call_id": call_id,
            "error": error, "code": str(ErrorCode.TOOL_FAILURE), "reason": reason,
            "retryable": reason == CATALOG_CHANGED, "retry_count": 0, "retry_exhausted": False,
            "timeout": False}


@dataclass
class ToolOutcome:
    status: str  # ok | error | timeout | forbidden | refused (nothing was sent)
    output: Any = None
    error: str | None = None
    attempts: int = 1
    events: list[dict[str, Any]] = field(default_factory=list)
    replayed: bool = False  # ss-tools answered from its Idempotency-Key store
    duration_ms: int = 0    # the whole call, retries and backoff included
    # An upstream MCP tool's call: its server, tool there and the caller (the audit's row).
    upstream: dict[str, Any] | None = None

    def message_text(self) -> str:
        if self.status == "ok":
            return json.dumps(self.output, ensure_ascii=False)
        return self.error or self.status


def trim(value: Any, limit: int) -> Any:
    """Cut a tool's output to what a card can show, keeping it JSON: a listing (`items`, or
    the longest list of the object, e.g. capabilities' `tools`) keeps its first entries, so a
    model still reads whole entries, never half a sentence."""
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= limit:
        return value
    lists = [k for k, v in value.items() if isinstance(v, list)] if isinstance(value, dict) \
        else []
    if lists:
        assert isinstance(value, dict)
        key = "items" if "items" in lists else max(lists, key=lambda k: len(value[k]))
        items = value[key]
        while items and len(json.dumps({**value, key: items}, ensure_ascii=False)) > limit:
            items = items[: len(items) // 2]
        if items:
            return {**value, key: items, "truncated": True}
    return {"truncated": True, "preview": text[:limit]}


class UpstreamRunner(Protocol):
    """Runs a catalog tool that is another team's MCP tool (agent/gate/upstream_calls.py)."""

    async def run(self, *, catalog: Catalog, tool: Tool, call_id: str, args: dict[str, Any],
                  user_jwt: str, emit: Emit, title: str) -> ToolOutcome: ...


class ToolRuntime:
    def __init__(self, *, base_url: str, tokens: ServiceTokenProvider,
                 http: httpx.AsyncClient, max_output_chars: int = 4000,
                 backoff_s: float = 1.0, upstream: UpstreamRunner | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.tokens = tokens
        self.http = http
        self.max_output_chars = max_output_chars
        self.backoff_s = backoff_s
        self.upstream = upstream

    async def run(self, *, catalog: Catalog, tool_name: str, call_id: str, args: dict[str, Any],
                  user_jwt: str, idempotency_key: str | None, emit: Emit, lang: Lang = "ru",
                  decision_id: str | None = None) -> ToolOutcome:
        """One call, its request built from `catalog`: the revision its decision was judged
        under (its caller checks that before it runs anything: agent/gate/execution.py)."""
        tool = catalog.get(tool_name)
        env = tool.environments_of(args)[0] if tool is not None else None
        with TRACER.start_as_current_span("agentchat.tool", attributes={
                "agentchat.tool": tool_name if tool is not None else "unknown",
                "agentchat.environment": env if env in catalog.environments else "",
                "agentchat.decision_id": decision_id or ""}) as span:
            started = time.monotonic()
            outcome = await self._run(catalog=catalog, tool_name=tool_name, call_id=call_id,
                                      args=args,
                                      user_jwt=user_jwt, idempotency_key=idempotency_key,
                                      emit=emit, lang=lang, decision_id=decision_id)
            outcome.duration_ms = int((time.monotonic() - started) * 1000)
            _count(span, tool_name if tool is not None else "unknown", outcome,
                   time.monotonic() - started)
            return outcome

    async def _run(self, *, catalog: Catalog, tool_name: str, call_id: str,
                   args: dict[str, Any], user_jwt: str, idempotency_key: str | None, emit: Emit,
                   lang: Lang, decision_id: str | None) -> ToolOutcome:
        tool = catalog.get(tool_name)
        title = tool_title(catalog, tool_name, lang)
        emit({"type": "tool_start", "tool": tool_name, "title": title, "call_id": call_id,
              "input": args})
        if tool is None:
            emit(refusal_event(tool_name, call_id, "not run: unknown tool", title))
            return ToolOutcome("refused", error="not run: unknown tool", attempts=0)
        if tool.upstream is not None:
            if self.upstream is None:
                error = "not run: upstream MCP tools are not wired in this process"
                emit(refusal_event(tool_name, call_id, error, title, "upstream_not_configured"))
                return ToolOutcome("refused", error=error, attempts=0)
            return await self.upstream.run(catalog=catalog, tool=tool, call_id=call_id,
                                           args=args, user_jwt=user_jwt, emit=emit, title=title)
        try:
            request = build_request(tool, args)
        except InvalidArguments as e:
            emit(refusal_event(tool_name, call_id, f"not run: invalid arguments: {e}", title))
            return ToolOutcome("refused", error=f"not run: invalid arguments: {e}", attempts=0)
        max_attempts = tool.max_attempts
        attempt = 0
        while True:
            attempt += 1
            headers = {"Authorization": f"Bearer {await self.tokens.get()}",
                       "X-User-JWT": user_jwt}
            if tool.risk != "read" and idempotency_key:
                headers["Idempotency-Key"] = idempotency_key
            if decision_id:
                headers["X-Decision-Id"] = decision_id
            # A replica paused after its run was taken over (or after the last attempt's
            # backoff) must not send it: the new owner does, under the same key.
            await current().verify()
            started = time.monotonic()
            with TRACER.start_as_current_span("agentchat.tool.attempt", attributes={
                    "agentchat.tool": tool_name, "agentchat.attempt": attempt,
                    "agentchat.max_attempts": max_attempts}) as span:
                try:
                    resp = await asyncio.wait_for(self.http.request(
                        request.method, self.base_url + request.path, params=request.params,
                        json=request.body,
                        headers=headers, timeout=tool.timeout_s + 1), tool.timeout_s)
                except (TimeoutError, httpx.TimeoutException):
                    span.set_attribute("agentchat.outcome", "timeout")
                    emit({"type": "tool_timeout", "tool": tool_name, "title": title,
                          "call_id": call_id, "timeout_seconds": tool.timeout_s,
                          "retryable": True})
                    return ToolOutcome("timeout", error=f"timed out after {tool.timeout_s:g} s",
                                       attempts=attempt)
                except httpx.HTTPError as e:
                    failure, transient = f"connection error: {type(e).__name__}", True
                    span.set_attribute("agentchat.outcome", "connection_error")
                else:
                    span.set_attribute("agentchat.http_status", resp.status_code)
                    if resp.status_code == 401 and attempt == 1:
                        self.tokens.invalidate()
                    if 200 <= resp.status_code < 300:
                        span.set_attribute("agentchat.outcome", "ok")
                        try:
                            output = resp.json()
                        except ValueError:
                            return self._error(emit, tool_name, title, call_id,
                                               "the ss-tools API returned an unreadable answer",
                                               attempt, False)
                        output = trim(output, self.max_output_chars)
                        emit({"type": "tool_end", "tool": tool_name, "title": title,
                              "call_id": call_id, "output": output,
                              "duration_ms": int((time.monotonic() - started) * 1000)})
                        return ToolOutcome("ok", output=output, attempts=attempt,
                                           replayed=resp.headers.get(
                                               "idempotent-replayed") == "true")
                    failure = f"Error {resp.status_code}: {_reason(resp)}"
                    transient = resp.status_code in TRANSIENT
                    span.set_attribute("agentchat.outcome", "error")
                    if resp.status_code == 403:
                        outcome = self._error(emit, tool_name, title, call_id, failure, attempt,
                                              False)
                        outcome.status = "forbidden"
                        return outcome
            if transient and attempt < max_attempts:
                emit({"type": "tool_retry", "tool": tool_name, "title": title,
                      "call_id": call_id, "attempt": attempt, "max_attempts": max_attempts})
                await asyncio.sleep(self.backoff_s)
                continue
            return self._error(emit, tool_name, title, call_id, failure, attempt,
                               transient, exhausted=transient)

    def _error(self, emit: Emit, tool: str, title: str, call_id: str, error: str,
               attempts: int, retryable: bool, exhausted: bool = False) -> ToolOutcome:
        emit({"type": "tool_error", "tool": tool, "title": title, "call_id": call_id,
              "error": error,
              "code": str(ErrorCode.TOOL_FAILURE), "retryable": retryable, "retry_count": attempts,
              "retry_exhausted": exhausted, "timeout": False})
        return ToolOutcome("error", error=error, attempts=attempts)


def _reason(resp: httpx.Response) -> str:
    try:
        data = resp.json()
        if isinstance(data, dict) and data.get("detail"):
            return str(data["detail"])[:200]
    except ValueError:
        pass
    return resp.reason_phrase or "failed"


def _count(span: Span, tool: str, outcome: ToolOutcome, seconds: float) -> None:
    """The call's metrics (TOOL_CALLS' outcomes: ok, error, timeout, refused) and its span."""
    label = outcome.status if outcome.status in ("ok", "timeout", "refused") else "error"
    TOOL_CALLS.labels(tool, label).inc()
    if outcome.status != "refused":
        TOOL_SECONDS.labels(tool).observe(seconds)
    span.set_attribute("agentchat.outcome", outcome.status)
    span.set_attribute("agentchat.attempts", outcome.attempts)
    span.set_attribute("agentchat.replayed", outcome.replayed)
    if outcome.status != "ok":
        span.set_status(Status(StatusCode.ERROR, outcome.status))
