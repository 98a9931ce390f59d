"""One endpoint per catalog tool, all through the same pipeline:

authenticate both tokens (401, nothing audited) → read and validate the arguments (422) →
known environments (404) → RBAC (403) → injected fault, sandbox mode only (502, delay or
garbage) → `Idempotency-Key` replay for write and destructive tools → execute → audit.
Every step after authentication writes exactly one audit record, and every answer after it
sets a `session` cookie for its user, as ss-tools (Flask) does.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from agentchat.catalog import Catalog, Tool
from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response
from agentchat.sandbox.access import Caller, Gatekeeper, refusal
from agentchat.sandbox.arguments import ArgumentReader, ArgumentsError
from agentchat.sandbox.audit import AuditLog
from agentchat.sandbox.context import OpContext, OpError, Reply
from agentchat.sandbox.data import ENV_IDS
from agentchat.sandbox.faults import FaultBoard
from agentchat.sandbox.idempotency import (
    MAX_KEY_LENGTH,
    IdempotencyStore,
    StoredResponse,
    fingerprint,
)
from agentchat.sandbox.world import World

log = logging.getLogger("agentchat.sandbox")

Operation = Callable[[OpContext, dict[str, Any]], Reply]
Endpoint = Callable[[Request], Awaitable[Response]]


class Gateway:
    """Builds the endpoint of each catalog tool over the shared state of one sandbox."""

    def __init__(self, *, catalog: Catalog, world: World, gatekeeper: Gatekeeper,
                 audit: AuditLog, idempotency: IdempotencyStore, faults: FaultBoard | None,
                 operations: dict[str, Operation], write_latency_s: float = 0.0) -> None:
        self.catalog = catalog
        self.world = world
        self.gatekeeper = gatekeeper
        self.audit = audit
        self.idempotency = idempotency
        self.faults = faults
        self.operations = operations
        self.write_latency_s = write_latency_s

    def endpoint(self, tool: Tool) -> Endpoint:
        reader = ArgumentReader(tool)

        async def call_tool(request: Request) -> Response:
            caller = self.gatekeeper.authenticate(request)  # TokenError → 401, no audit
            response = await handle(request, caller)
            # As Superset's Flask session does: a cookie for this user on every answer. A
            # client shared by users must never send it back (docs/protocol.md §7).
            response.set_cookie("session", f"{caller.user.sub}.{secrets.token_urlsafe(8)}",
                                path="/", httponly=True, samesite="lax")
            return response

        async def handle(request: Request, caller: Caller) -> Response:
            key = request.headers.get("idempotency-key") or None
            # Recorded as sent (cut): it joins the agent's trail, it grants nothing here.
            decision_id = (request.headers.get("x-decision-id") or "")[:128] or None
            audit = _Auditor(self.audit, caller, tool, key, decision_id,
                             trace_of(request.headers.get("traceparent")),
                             (request.headers.get("cookie") or "")[:512] or None)
            try:
                args = await reader.read(request)
            except ArgumentsError as e:
                audit(e.raw, None, "error")
                return error_response(422, ErrorCode.INVALID_REQUEST, e.detail)
            target, source = tool.environments_of(args)
            for env in (target, source):
                if env is not None and env not in ENV_IDS:
                    audit(args, target, "not_found")
                    return error_response(404, ErrorCode.NOT_FOUND, f"environment {env} not found")
            reason = refusal(caller.user, tool.risk, target, source)
            if reason is not None:
                audit(args, target, "forbidden")
                return error_response(403, ErrorCode.FORBIDDEN, reason)
            faulted = await self._fault(tool)
            if faulted is not None:
                audit(args, target, "error")
                return faulted
            if tool.risk == "read" or key is None:
                return await self._execute(tool, args, caller, audit, target, key=None)
            if len(key) > MAX_KEY_LENGTH:
                audit(args, target, "error")
                return error_response(422, ErrorCode.INVALID_REQUEST, "Idempotency-Key is too long")
            # One key at a time: a concurrent twin waits here, then finds the stored response.
            async with self.idempotency.hold(key):
                fp = fingerprint(tool.name, args, caller.user.sub)
                stored = self.idempotency.get(key)
                if stored is not None:
                    if stored.fingerprint != fp:
                        audit(args, target, "error")
                        return error_response(422, ErrorCode.INVALID_REQUEST,
                                      "Idempotency-Key was already used for another request")
                    audit(args, target, "replayed")
                    return JSONResponse(stored.body, status_code=stored.status,
                                        headers={"Idempotent-Replayed": "true"})
                return await self._execute(tool, args, caller, audit, target, key=key, fp=fp)

        call_tool.__name__ = tool.name
        return call_tool

    async def _fault(self, tool: Tool) -> Response | None:
        fault = self.faults.take(tool.name) if self.faults is not None else None
        if fault is None:
            return None
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault.garbage:
            return PlainTextResponse("<html><body>upstream sent garbage</body></html>",
                                     media_type="text/html")
        if fault.status is not None:
            return error_response(fault.status, ErrorCode.INTERNAL,
                          f"injected fault: {tool.name} failed with {fault.status}")
        return None  # a delay alone: the call goes on

    async def _execute(self, tool: Tool, args: dict[str, Any], caller: Caller, audit: _Auditor,
                       target: str | None, *, key: str | None, fp: str = "") -> Response:
        if tool.risk != "read" and self.write_latency_s:
            # The backend's own work takes time; concurrent twins of one key overlap here.
            await asyncio.sleep(self.write_latency_s)
        self.world.advance()
        ctx = OpContext(world=self.world, catalog=self.catalog, user=caller.user)
        operation = self.operations.get(tool.name)
        if operation is None:
            audit(args, target, "error")
            return error_response(501, ErrorCode.INTERNAL,
                                  f"the sandbox does not implement {tool.name}")
        try:
            reply = operation(ctx, args)
            status, body, outcome = reply.status, reply.body, "ok"
        except OpError as e:
            status, body, outcome = e.http_status, e.to_dict(), e.outcome
        except Exception:
            # Not stored under the key: the call may be retried. No token is in this log line.
            log.exception("operation %s failed", tool.name)
            audit(args, target, "error")
            return error_response(500, ErrorCode.INTERNAL, f"{tool.name} failed inside the sandbox")
        if key is not None:
            self.idempotency.put(key, StoredResponse(fp, status, body))
        audit(args, target, outcome)
        return JSONResponse(body, status_code=status)


# W3C Trace Context, version 00: version-trace_id-parent_id-flags, lowercase hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_of(traceparent: str | None) -> str | None:
    """The trace id of a valid `traceparent` (not all zeros), else None: only that is kept."""
    match = _TRACEPARENT.fullmatch((traceparent or "").strip())
    if match is None or match.group(1) == "0" * 32:
        return None
    return match.group(1)


class _Auditor:
    """Writes the one audit record of a request, with its caller and key filled in."""

    def __init__(self, log_: AuditLog, caller: Caller, tool: Tool, key: str | None,
                 decision_id: str | None = None, trace_id: str | None = None,
                 cookie: str | None = None) -> None:
        self.log, self.caller, self.tool, self.key = log_, caller, tool, key
        self.decision_id, self.trace_id, self.cookie = decision_id, trace_id, cookie

    def __call__(self, args: dict[str, Any], env: str | None, outcome: str) -> None:
        self.log.record(service_actor=self.caller.service.sub, user_actor=self.caller.user.sub,
                        operation=self.tool.name, env=env, args=args, outcome=outcome,
                        idempotency_key=self.key, decision_id=self.decision_id,
                        trace_id=self.trace_id, cookie=self.cookie)
