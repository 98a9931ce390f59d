"""The policy sidecar's HTTP API (docs/protocol.md §6): FastAPI on 127.0.0.1:8181.

Every POST carries the service JWT (`Authorization: Bearer`) and the user JWT (`X-User-JWT`).
Order of checks, cheapest first: token sizes (413), service token (401), a loaded policy
(503), body size (413), body schema (400), then the user token, whose failure is an answer,
not an error: `deny` with `user_token_invalid:<cause>`, so the agent shows UNAUTHORIZED.
Bodies are parsed with pydantic directly rather than through FastAPI's body binding, so the
size limit applies before parsing and schema errors are 400 with docs/protocol.md §5's shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from agentchat import heap
from agentchat.errors import ErrorCode, LocalError, TokenError
from agentchat.identity import (
    MAX_TOKEN_BYTES,
    Principal,
    bearer,
    service_verifier,
    user_verifier,
)
from agentchat.telemetry import fastapi_telemetry, setup_telemetry
from agentchat.verified_tokens import CachedVerifier

from .decision_log import DecisionLog
from .engine import (
    UNKNOWN_ENVIRONMENT,
    USER_TOKEN_INVALID,
    CheckRequest,
    Decision,
    decide,
    denial,
    permissions,
)
from .metrics import PolicyMetrics
from .reload import PolicyStore
from .settings import PolicySettings
from .snapshot import Snapshot

log = logging.getLogger("agentchat.policy")
# A batch's decisions, as events of its server span (a single check's are the span's attributes).
DECISION_EVENT = "agentchat.policy.decision"


class CheckContext(BaseModel):
    """What the agent knows about the turn: `untrusted` once ss-tools output entered it."""

    model_config = ConfigDict(extra="forbid")
    untrusted: StrictBool = False


class CheckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str = Field(min_length=1, max_length=200)
    environment: str | None = Field(default=None, max_length=100)
    tool: str = Field(min_length=1, max_length=100)
    arguments: dict[str, Any] = Field(default_factory=dict)
    context: CheckContext = Field(default_factory=CheckContext)
    # The catalog revision the caller validated the arguments with and will build the request
    # from (agentchat.catalog.catalog_revision); another than the one served is refused (409).
    catalog_revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")


class BatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checks: list[CheckBody] = Field(min_length=1)


class PermissionsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str | None = Field(default=None, max_length=200)
    environment: str | None = Field(default=None, max_length=100)


class Refused(LocalError):
    """Stops a request with an HTTP error in docs/protocol.md §5's `{code, detail}` shape."""

    def __init__(self, status: int, code: ErrorCode, detail: str) -> None:
        super().__init__(detail, code=code, status=status)


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _source_env(snapshot: Snapshot | None, body: CheckBody) -> str | None:
    """A migration's source environment for the decision log (a replay needs it): only a
    catalog environment's name, never any other argument text."""
    if snapshot is None:
        return None
    tool = snapshot.tools.get(body.tool)
    if tool is None or tool.environment is None or tool.environment.source_argument is None:
        return None
    value = body.arguments.get(tool.environment.source_argument)
    return value if isinstance(value, str) and value in snapshot.environment_set else None


class Sidecar:
    """Everything a request needs: settings, verifiers, the snapshot store, log and metrics."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self.metrics = PolicyMetrics()
        self.store = PolicyStore(settings.policy_dir, settings.catalog_path,
                                 settings.policy_tests_dir)
        self.store.listeners.append(self.metrics.on_reload)
        ttl, size = settings.tuning.token_cache_s, settings.tuning.token_cache_size
        self.service = CachedVerifier(service_verifier(settings), ttl_s=ttl, max_size=size)
        # `role@env` may name the environments of the serving snapshot's catalog (it reloads).
        # Without a snapshot every POST is a 503 before the user token is read.
        def environments() -> frozenset[str]:
            snapshot = self.store.snapshot
            return snapshot.environment_set if snapshot is not None else frozenset()

        self.user = CachedVerifier(user_verifier(settings, environments=environments),
                                   ttl_s=ttl, max_size=size)
        self.log = DecisionLog(stdout=settings.policy_decision_log_stdout,
                               path=settings.policy_decision_log_path)

    # -- the common front of every POST ---------------------------------------------------

    async def admit(self, request: Request, model: type[BaseModel]) -> tuple[
            Principal, BaseModel, Principal | TokenError]:
        user_jwt = request.headers.get("x-user-jwt")
        if len(user_jwt or "") > MAX_TOKEN_BYTES:
            raise Refused(413, ErrorCode.INVALID_REQUEST, "a token is over 8 KB")
        service = self.verify_service(request)
        if self.store.snapshot is None:
            raise Refused(503, ErrorCode.POLICY_UNAVAILABLE,
                          f"no policy loaded: {self.store.last_error or 'loading'}")
        body = await self._body(request)
        try:
            parsed = model.model_validate_json(body)
        except ValidationError as e:
            detail = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'body'}: {x['msg']}"
                               for x in e.errors()[:5])
            raise Refused(400, ErrorCode.INVALID_REQUEST, detail) from None
        user: Principal | TokenError
        try:
            user = self.user.verify(user_jwt)
        except TokenError as e:
            user = e
        return service, parsed, user

    def verify_service(self, request: Request) -> Principal:
        """The service JWT (`Authorization: Bearer`): 413 over 8 KB, 401 when refused."""
        if len(request.headers.get("authorization", "")) > MAX_TOKEN_BYTES + 7:
            raise Refused(413, ErrorCode.INVALID_REQUEST, "a token is over 8 KB")
        token = bearer(request.headers)
        try:
            if token is None:
                raise TokenError("missing", "service token refused: missing Bearer token")
            return self.service.verify(token)
        except TokenError as e:
            self.metrics.service_refused.labels(e.cause).inc()
            raise Refused(401, ErrorCode.UNAUTHORIZED,
                          f"service token refused: {e.cause}") from None

    async def _body(self, request: Request) -> bytes:
        limit = self.settings.tuning.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise Refused(413, ErrorCode.INVALID_REQUEST, f"body over {limit // 1024} KB")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Refused(413, ErrorCode.INVALID_REQUEST, f"body over {limit // 1024} KB")
            chunks.append(chunk)
        return b"".join(chunks)

    # -- decisions ------------------------------------------------------------------------

    def check(self, service: Principal, user: Principal | TokenError, body: CheckBody,
              started: float, *, batch: bool = False) -> Decision:
        decision = self._check(service, user, body, started)
        span = trace.get_current_span()  # FastAPI's server span, continuing the agent's trace
        if span.is_recording():
            # What the decision was about and what it said; never tokens, subjects or argument
            # values (the decision log holds their digest). On the request's own span rather
            # than a child span: that halves the spans a traced decision costs
            # (bench/HISTORY.md, "The evening's changes, and an idle re-run"). A batch's
            # decisions are events of its span, one each.
            about = {
                "agentchat.tool": decision.tool,
                "agentchat.environment": decision.env_context or body.environment or "",
                "agentchat.decision": decision.decision,
                "agentchat.reason_code": decision.reason_code,
                "agentchat.decision_id": decision.decision_id,
                "agentchat.policy_revision": decision.policy_revision or "",
            }
            if batch:
                span.add_event(DECISION_EVENT, about)
            else:
                span.set_attributes(about)
        return decision

    def _check(self, service: Principal, user: Principal | TokenError, body: CheckBody,
               started: float) -> Decision:
        snapshot = self.store.snapshot  # read once: this request sees one whole policy
        if (snapshot is not None and body.catalog_revision is not None
                and body.catalog_revision != snapshot.catalog.revision):
            # Judged under one catalog, built under another: the path or method may differ.
            raise Refused(409, ErrorCode.POLICY_UNAVAILABLE,
                          f"catalog revision {body.catalog_revision}; the sidecar serves "
                          f"{snapshot.catalog.revision}")
        req = CheckRequest(body.request_id, body.environment, body.tool, body.arguments,
                           untrusted=body.context.untrusted)
        if snapshot is None:  # unreachable after admit(); kept so no path can answer allow
            decision = denial(req, "internal_error", env=body.environment)
        elif isinstance(user, TokenError):
            decision = denial(req, f"{USER_TOKEN_INVALID}:{user.cause}",
                              tool=snapshot.tools.get(body.tool), env=body.environment,
                              revision=snapshot.revision)
        else:
            decision = decide(snapshot, user.roles, req)
        elapsed = time.perf_counter() - started
        self.metrics.decided(decision.decision, decision.reason_code, elapsed)
        self.log.write(
            decision, service_sub=service.sub,
            user_sub=None if isinstance(user, TokenError) else user.sub,
            roles=[] if isinstance(user, TokenError) else user.role_strings(),
            env=decision.env_context or body.environment, arguments=body.arguments,
            context={"untrusted": body.context.untrusted}, latency_us=int(elapsed * 1e6),
            source_env=_source_env(snapshot, body))
        return decision

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        reasons = []
        if self.store.snapshot is None:
            reasons.append(f"no policy loaded: {self.store.last_error or 'loading'}")
        for name, verifier in (("service", self.service), ("user", self.user)):
            if not verifier.verifier.jwks.keys():
                reasons.append(f"{name} token JWKS has no keys: {verifier.verifier.jwks.path}")
        detail = {
            "ready": not reasons, "reasons": reasons,
            "policy_revision": self.store.revision,
            "policy_dir": str(self.store.policy_dir),
            "loaded_at": self.store.loaded_at,
            "last_reload_error": self.store.last_error,
        }
        return not reasons, detail


def create_app(settings: PolicySettings | None = None) -> FastAPI:
    settings = settings or PolicySettings()
    setup_telemetry("agentchat-policy")  # off unless OTEL_* turn it on
    sidecar = Sidecar(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await sidecar.store.areload()
        frozen = heap.tune(freeze=settings.tuning.gc_freeze,
                           gen0_threshold=settings.tuning.gc_gen0_threshold)
        log.info("garbage collector: thresholds %s, %d objects frozen", gc.get_threshold(),
                 frozen)
        stop = asyncio.Event()
        watcher = asyncio.create_task(sidecar.store.watch(
            stop, debounce_ms=settings.tuning.reload_debounce_ms,
            poll_s=settings.tuning.reload_poll_s))
        try:
            yield
        finally:
            stop.set()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(watcher, timeout=5)
            sidecar.log.close()

    app = FastAPI(title="AgentChat policy sidecar", lifespan=lifespan, docs_url=None,
                  redoc_url=None, telemetry=fastapi_telemetry())
    app.state.sidecar = sidecar

    @app.exception_handler(Refused)
    async def _refused(request: Request, exc: Refused) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
        resp = _json(exc.to_dict(), exc.http_status)
        if headers:
            resp.headers.update(headers)
        return resp

    @app.get("/livez")
    async def livez() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        ready, detail = sidecar.readiness()
        return _json(detail, 200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(sidecar.metrics.render(), media_type="text/plain; version=0.0.4")

    # The decision routes are plain Starlette routes on the FastAPI app: they parse their own
    # bodies (size limit first), and skipping FastAPI's dependency solving saves a large part
    # of the per-request overhead (measured in-process: ~280 us -> ~160 us per check here).
    async def check(request: Request) -> Response:
        started = time.perf_counter()
        service, body, user = await sidecar.admit(request, CheckBody)
        assert isinstance(body, CheckBody)
        return _json(sidecar.check(service, user, body, started).to_dict())

    async def checks(request: Request) -> Response:
        started = time.perf_counter()
        service, body, user = await sidecar.admit(request, BatchBody)
        assert isinstance(body, BatchBody)
        if len(body.checks) > settings.tuning.max_batch:
            raise Refused(400, ErrorCode.INVALID_REQUEST,
                          f"at most {settings.tuning.max_batch} checks per batch")
        results = [sidecar.check(service, user, c, started, batch=True).to_dict()
                   for c in body.checks]
        return _json({"results": results})

    async def perms(request: Request) -> Response:
        _service, body, user = await sidecar.admit(request, PermissionsBody)
        assert isinstance(body, PermissionsBody)
        snapshot = sidecar.store.snapshot
        assert snapshot is not None
        out: dict[str, Any] = {"request_id": body.request_id, "environment": body.environment,
                               "policy_revision": snapshot.revision, "tools": []}
        if isinstance(user, TokenError):
            out["reason_code"] = f"{USER_TOKEN_INVALID}:{user.cause}"
        elif body.environment is not None and body.environment not in snapshot.environments:
            out["reason_code"] = UNKNOWN_ENVIRONMENT
        else:
            out["reason_code"] = "allowed"
            out["user"] = {"sub": user.sub, "roles": user.role_strings()}
            out["tools"] = permissions(snapshot, user.roles, body.environment)
        return _json(out)

    async def policy(request: Request) -> Response:
        # The service token only: this says which policy serves, not what a user may do. It
        # names files and a refused edit's reason, so it is not open like /readyz.
        sidecar.verify_service(request)
        return _json(sidecar.store.status())

    for path, endpoint in (("/v1/check", check), ("/v1/checks", checks),
                           ("/v1/permissions", perms)):
        app.add_route(path, endpoint, methods=["POST"], include_in_schema=False)
    app.add_route("/v1/policy", policy, methods=["GET"], include_in_schema=False)
    return app
