"""The agent's side of docs/protocol.md §6: ask the policy sidecar about one tool call.

Each check is a span `agentchat.policy.check` (tool, environment, the arguments' digest, the
decision, its `decision_id` and `policy_revision`; never a token or an argument's value) and
counts in POLICY_DECISIONS / POLICY_LATENCY. It is the request's client span: its W3C
`traceparent` goes with the request, so the sidecar's server span continues it. The requests
go over the sidecar's own connections (policy_wire.py), not the shared httpx client.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, cast

import orjson
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentchat.agent.audit.chain import args_digest
from agentchat.agent.gate.policy_wire import PolicyWire, WireError
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
    def __init__(self, *, url: str, timeout_s: float, tokens: ServiceTokenProvider) -> None:
        self.wire = PolicyWire(url)
        self.check_url = self.wire.url("/v1/check")
        self.timeout_s = timeout_s
        self.tokens = tokens

    async def aclose(self) -> None:
        await self.wire.aclose()

    async def check(self, *, user_jwt: str, tool: str, arguments: dict[str, Any],
                    environment: str | None, untrusted: bool = False,
                    catalog_revision: str | None = None) -> dict[str, Any]:
        """The sidecar's decision; raises UNAUTHORIZED, INVALID_REQUEST or POLICY_UNAVAILABLE.

        `arguments` must be the validated ones the request will be built from (the gate checks
        exactly what runs); `untrusted` says the model's context is untrusted; the sidecar
        answers only for `catalog_revision` (the catalog the arguments were validated with),
        else 409, which is POLICY_UNAVAILABLE here. The decision carries the revision.
        """
        about: dict[str, str | bool] = {
            "agentchat.tool": tool, "agentchat.environment": environment or "",
            "agentchat.untrusted": untrusted, "http.url": self.check_url}
        with TRACER.start_as_current_span("agentchat.policy.check", kind=SpanKind.CLIENT,
                                          attributes=about) as span:
            if span.is_recording():  # the digest is a canonical encoding: only when kept
                span.set_attribute("agentchat.args_hash", args_digest(arguments))
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
        status, decision = await self._post("/v1/check", body, user_jwt)
        if status == 401:
            # Our own token is refused twice (expired: no operator renewed it): an outage.
            SERVICE_TOKEN_REFUSED.inc()
            raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                 "the policy service refused the service token")
        if status in (400, 413, 422):
            raise AgentChatError(ErrorCode.INVALID_REQUEST,
                                 "the tool call was refused as malformed")
        kind = decision.get("decision") if isinstance(decision, dict) else None
        if kind == "deny" and str(decision.get("reason_code", "")).startswith(
                "user_token_invalid"):
            raise AgentChatError(ErrorCode.UNAUTHORIZED, "the user token was refused")
        if status != 200 or kind not in OUTCOMES:
            raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                 "the policy service is unavailable")
        return cast(dict[str, Any], decision)

    async def permissions(self, *, user_jwt: str, environment: str | None) -> set[str]:
        """The tools this user may run in `environment` (None: without one), as the sidecar's
        `/v1/permissions` says (the trusted-context view: no context rules). A refused user
        token: UNAUTHORIZED; no answer: POLICY_UNAVAILABLE."""
        body = {"request_id": str(uuid.uuid4()), "environment": environment}
        status, answer = await self._post("/v1/permissions", body, user_jwt)
        if status != 200 or not isinstance(answer, dict):
            raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                 "the policy service is unavailable")
        if str(answer.get("reason_code", "")).startswith("user_token_invalid"):
            raise AgentChatError(ErrorCode.UNAUTHORIZED, "the user token was refused")
        return {str(t["tool"]) for t in answer.get("tools") or []
                if isinstance(t, dict) and t.get("allow")}

    async def _post(self, path: str, body: dict[str, Any], user_jwt: str
                    ) -> tuple[int, Any]:
        """One POST with both tokens and the current span's `traceparent`: (status, the
        JSON answer of a 200, else None). Our service token refused (401: a rotation) is
        re-read and the request sent once more; a second 401 is returned. No answer in
        time, or none readable: POLICY_UNAVAILABLE."""
        data = _encode(body)
        for attempt in (1, 2):
            headers = {"Authorization": f"Bearer {await self.tokens.get()}",
                       "X-User-JWT": user_jwt}
            propagate.inject(headers)
            try:
                status, raw = await self.wire.post(path, data, headers, self.timeout_s)
            except WireError:
                raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                     "the policy service did not answer in time") from None
            if status == 401 and attempt == 1:
                self.tokens.invalidate()  # a rotation: re-read the token, try once more
                continue
            if status != 200:
                return status, None
            try:
                return status, orjson.loads(raw)
            except orjson.JSONDecodeError:
                return status, None
        return 401, None

    async def check_call(self, *, user_jwt: str, tool: Tool, arguments: dict[str, Any],
                         untrusted: bool, catalog_revision: str) -> dict[str, Any]:
        """`check` for one catalog tool's call: the environment is the call's own argument;
        `catalog_revision` is that of the catalog `tool` comes from."""
        return await self.check(user_jwt=user_jwt, tool=tool.name, arguments=arguments,
                                environment=tool.environments_of(arguments)[0],
                                untrusted=untrusted, catalog_revision=catalog_revision)


def _encode(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # an integer over 64 bits, which JSON itself allows
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _describe(span: Span, decision: dict[str, Any]) -> None:
    """The decision on its span: ids and names only (reason codes are the sidecar's words)."""
    for key in ("decision", "decision_id", "policy_revision", "reason_code", "risk"):
        value = decision.get(key)
        if isinstance(value, str):
            span.set_attribute(f"agentchat.{key}", value)
