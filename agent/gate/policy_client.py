"""The agent's side of docs/protocol.md §6: ask the policy sidecar about one tool call.

Each check is a span `agentchat.policy.check` (tool, environment, the arguments' digest, the
decision, its `decision_id` and `policy_revision`; never a token or an argument's value) and
counts in POLICY_DECISIONS / POLICY_LATENCY.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from agentchat.agent.audit.chain import args_digest
from agentchat.agent.gate.service_token import ServiceTokenProvider
from agentchat.agent.metrics import POLICY_DECISIONS, POLICY_LATENCY, SERVICE_TOKEN_REFUSED
from agentchat.catalog import Tool
from agentchat.errors import AgentChatError, ErrorCode

TRACER = trace.get_tracer("agentchat.agent")
# POLICY_DECISIONS' outcomes: the sidecar's decisions by their short names. A refused user
# token is the sidecar's deny (the user's); a refused service token is POLICY_UNAVAILABLE and
# counts as unavailable (ours: no tool can run, the sidecar-unavailable alert must see it).
OUTCOMES = {"allow": "allow", "allow_with_confirmation": "confirm", "deny": "deny"}
FAILED_OUTCOMES = {ErrorCode.POLICY_UNAVAILABLE: "unavailable", ErrorCode.UNAUTHORIZED: "deny"}


class PolicyClient:
    def __init__(self, *, url: str, timeout_s: float, tokens: ServiceTokenProvider,
                 http: httpx.AsyncClient) -> None:
        self.url = url.rstrip("/") + "/v1/check"
        self.timeout_s = timeout_s
        self.tokens = tokens
        self.http = http

    async def check(self, *, user_jwt: str, tool: str, arguments: dict[str, Any],
                    environment: str | None, untrusted: bool = False,
                    catalog_revision: str | None = None) -> dict[str, Any]:
        """The sidecar's decision; raises UNAUTHORIZED, INVALID_REQUEST or POLICY_UNAVAILABLE.

        `arguments` must be the validated ones the request will be built from (the gate checks
        exactly what runs); `untrusted` says the model's context is untrusted; the sidecar
        answers only for `catalog_revision` (the catalog the arguments were validated with),
        else 409, which is POLICY_UNAVAILABLE here. The decision carries the revision.
        """
        with TRACER.start_as_current_span("agentchat.policy.check", attributes={
                "agentchat.tool": tool, "agentchat.environment": environment or "",
                "agentchat.args_hash": args_digest(arguments),
                "agentchat.untrusted": untrusted}) as span:
            started = time.monotonic()
            try:
                decision = await self._ask(user_jwt=user_jwt, tool=tool, arguments=arguments,
                                           environment=environment, untrusted=untrusted,
                                           catalog_revision=catalog_revision)
            except AgentChatError as e:
                # A refused user token is the sidecar's deny; a malformed call is no decision.
                if e.code in FAILED_OUTCOMES:
                    POLICY_DECISIONS.labels(FAILED_OUTCOMES[e.code]).inc()
                span.set_attribute("agentchat.error_code", str(e.code))
                span.set_status(Status(StatusCode.ERROR, str(e.code)))
                raise
            finally:
                POLICY_LATENCY.observe(time.monotonic() - started)
            POLICY_DECISIONS.labels(OUTCOMES[decision["decision"]]).inc()
            _describe(span, decision)
            return {**decision, "catalog_revision": catalog_revision}

    async def _ask(self, *, user_jwt: str, tool: str, arguments: dict[str, Any],
                   environment: str | None, untrusted: bool,
                   catalog_revision: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"request_id": str(uuid.uuid4()), "environment": environment,
                                "tool": tool, "arguments": arguments}
        if catalog_revision:
            body["catalog_revision"] = catalog_revision
        if untrusted:
            body["context"] = {"untrusted": True}
        for attempt in (1, 2):
            token = await self.tokens.get()
            try:
                resp = await self.http.post(
                    self.url, json=body, timeout=self.timeout_s,
                    headers={"Authorization": f"Bearer {token}", "X-User-JWT": user_jwt})
            except httpx.HTTPError:
                raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                     "the policy service did not answer in time") from None
            if resp.status_code == 401:
                if attempt == 1:
                    self.tokens.invalidate()  # a rotation: re-read the token, try once more
                    continue
                # Our own token is refused (expired: no operator renewed it): an outage.
                SERVICE_TOKEN_REFUSED.inc()
                raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                     "the policy service refused the service token")
            if resp.status_code in (400, 413, 422):
                raise AgentChatError(ErrorCode.INVALID_REQUEST,
                                     "the tool call was refused as malformed")
            if resp.status_code != 200:
                break
            try:
                decision: dict[str, Any] = resp.json()
                kind = decision["decision"]
            except (ValueError, KeyError, TypeError):
                break
            if kind == "deny" and str(decision.get("reason_code", "")).startswith(
                    "user_token_invalid"):
                raise AgentChatError(ErrorCode.UNAUTHORIZED, "the user token was refused")
            if kind not in OUTCOMES:
                break
            return decision
        raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE, "the policy service is unavailable")

    async def permissions(self, *, user_jwt: str, environment: str | None) -> set[str]:
        """The tools this user may run in `environment` (None: without one), as the sidecar's
        `/v1/permissions` says (the trusted-context view: no context rules). A refused user
        token: UNAUTHORIZED; no answer: POLICY_UNAVAILABLE."""
        body = {"request_id": str(uuid.uuid4()), "environment": environment}
        url = self.url.removesuffix("/check") + "/permissions"
        for attempt in (1, 2):
            try:
                resp = await self.http.post(url, json=body, timeout=self.timeout_s, headers={
                    "Authorization": f"Bearer {await self.tokens.get()}",
                    "X-User-JWT": user_jwt})
            except httpx.HTTPError:
                break
            if resp.status_code == 401 and attempt == 1:
                self.tokens.invalidate()
                continue
            try:
                answer = resp.json() if resp.status_code == 200 else None
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                break
            if str(answer.get("reason_code", "")).startswith("user_token_invalid"):
                raise AgentChatError(ErrorCode.UNAUTHORIZED, "the user token was refused")
            return {str(t["tool"]) for t in answer.get("tools") or []
                    if isinstance(t, dict) and t.get("allow")}
        raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE, "the policy service is unavailable")

    async def check_call(self, *, user_jwt: str, tool: Tool, arguments: dict[str, Any],
                         untrusted: bool, catalog_revision: str) -> dict[str, Any]:
        """`check` for one catalog tool's call: the environment is the call's own argument;
        `catalog_revision` is that of the catalog `tool` comes from."""
        return await self.check(user_jwt=user_jwt, tool=tool.name, arguments=arguments,
                                environment=tool.environments_of(arguments)[0],
                                untrusted=untrusted, catalog_revision=catalog_revision)


def _describe(span: Span, decision: dict[str, Any]) -> None:
    """The decision on its span: ids and names only (reason codes are the sidecar's words)."""
    for key in ("decision", "decision_id", "policy_revision", "reason_code", "risk"):
        value = decision.get(key)
        if isinstance(value, str):
            span.set_attribute(f"agentchat.{key}", value)
