"""The sandbox ss-tools API: an honest stand-in for the ss-tools backend, for the demo and the
tests, never for production.

`create_app(settings)` reads the catalog once at start and mounts one endpoint per tool (its
method and path), plus the service-token endpoint, the audit, health probes and, in sandbox
mode only, fault injection and reset.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, SecretStr

from agentchat.catalog import load_catalog
from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response, install_error_handlers
from agentchat.identity import service_verifier, user_verifier
from agentchat.keys import ensure_ring, load_ring, sign_service_token
from agentchat.sandbox.access import Gatekeeper
from agentchat.sandbox.audit import AuditLog
from agentchat.sandbox.exchange import TokenJournal
from agentchat.sandbox.exchange import install as install_exchange
from agentchat.sandbox.faults import Fault, FaultBoard
from agentchat.sandbox.gateway import Gateway
from agentchat.sandbox.idempotency import IdempotencyStore
from agentchat.sandbox.ops_dashboards import OPERATIONS as DASHBOARD_OPERATIONS
from agentchat.sandbox.ops_platform import OPERATIONS as PLATFORM_OPERATIONS
from agentchat.sandbox.settings import SandboxSettings
from agentchat.sandbox.world import World

log = logging.getLogger("agentchat.sandbox")
OPERATIONS = {**DASHBOARD_OPERATIONS, **PLATFORM_OPERATIONS}


class ServiceTokenRequest(BaseModel):
    client_id: str
    client_secret: SecretStr


@dataclass
class Sandbox:
    """The process-local state behind one app."""

    world: World
    audit: AuditLog
    idempotency: IdempotencyStore
    faults: FaultBoard | None
    tokens: TokenJournal | None = None  # dev: the token exchange's and the routes' tokens

    def reset(self) -> None:
        self.world.reset()
        self.audit.clear()
        self.idempotency.clear()
        if self.tokens is not None:
            self.tokens.clear()
        if self.faults is not None:
            self.faults.clear()


def create_app(settings: SandboxSettings | None = None) -> FastAPI:
    settings = settings or SandboxSettings()
    catalog = load_catalog(settings.catalog_path)  # a broken catalog stops the start here
    if settings.is_dev:
        ensure_ring(settings.keys_dir, settings.jwks_path)
    gatekeeper = Gatekeeper(service_verifier(settings), user_verifier(settings))
    sandbox = Sandbox(World(settings.task_step_s), AuditLog(), IdempotencyStore(),
                      FaultBoard() if settings.faults_enabled else None,
                      TokenJournal() if settings.is_dev else None)
    gateway = Gateway(catalog=catalog, world=sandbox.world, gatekeeper=gatekeeper,
                      audit=sandbox.audit, idempotency=sandbox.idempotency,
                      faults=sandbox.faults, operations=OPERATIONS,
                      write_latency_s=settings.write_latency_s)

    app = FastAPI(title="ss-tools sandbox API", version="1", docs_url="/api/docs",
                  openapi_url="/api/openapi.json")
    app.state.sandbox = sandbox
    install_error_handlers(app, log)

    @app.get("/livez", include_in_schema=False)
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        ready = gatekeeper.ready()
        return JSONResponse({"ready": ready, "tools": len(catalog.tools),
                             "keys": "loaded" if ready else "a JWKS file has no keys"},
                            status_code=200 if ready else 503)

    @app.post("/api/auth/service-token", tags=["auth"], response_model=None)
    async def service_token(body: ServiceTokenRequest) -> dict[str, Any] | JSONResponse:
        secret = settings.client_secret.get_secret_value() if settings.client_secret else ""
        # Both compared in constant time, and both always compared.
        ok_id = hmac.compare_digest(body.client_id.encode(), settings.client_id.encode())
        ok_secret = hmac.compare_digest(body.client_secret.get_secret_value().encode(),
                                        secret.encode())
        if not (ok_id and ok_secret and secret):
            return error_response(401, ErrorCode.UNAUTHORIZED,
                                  "unknown client or wrong client secret")
        try:
            ring = load_ring(settings.keys_dir)  # re-read: the operator rotates the Secret
        except (OSError, ValueError, KeyError):
            return error_response(503, ErrorCode.INTERNAL, "no signing keys available")
        token = sign_service_token(ring, issuer=settings.service_issuer,
                                   audience=settings.service_audience, subject=body.client_id,
                                   lifetime_s=settings.service_token_lifetime_s)
        return {"access_token": token, "token_type": "Bearer",
                "expires_in": settings.service_token_lifetime_s}

    @app.get("/api/audit", tags=["audit"])
    async def read_audit(request: Request, operation: str | None = None,
                         user_actor: str | None = None, outcome: str | None = None,
                         idempotency_key: str | None = None,
                         decision_id: str | None = None) -> dict[str, Any]:
        gatekeeper.authenticate(request)
        return {"items": sandbox.audit.query(operation=operation, user_actor=user_actor,
                                             outcome=outcome, idempotency_key=idempotency_key,
                                             decision_id=decision_id)}

    if sandbox.faults is not None:
        _sandbox_routes(app, sandbox, {t.name for t in catalog.tools})
    if sandbox.tokens is not None:
        # The user tokens' issuer's token exchange, as the MCP endpoint uses it (RFC 8693).
        install_exchange(app, settings, sandbox.tokens)

    for tool in catalog.tools:
        if tool.path is None or tool.method is None:
            continue  # another team's MCP server runs it, not ss-tools
        app.add_api_route(tool.path, gateway.endpoint(tool), methods=[tool.method],
                          name=tool.name, summary=tool.description.en, tags=["tools"])
    return app


def _sandbox_routes(app: FastAPI, sandbox: Sandbox, names: set[str]) -> None:
    """Fault injection and reset: dev only, no auth (they exist for tests and the demo)."""
    faults = sandbox.faults
    assert faults is not None

    @app.post("/api/sandbox/faults", tags=["sandbox"])
    async def add_fault(fault: Fault) -> JSONResponse:
        if fault.operation not in names:
            return error_response(422, ErrorCode.INVALID_REQUEST,
                                  f"unknown operation {fault.operation}")
        faults.add(fault)
        return JSONResponse({"items": faults.pending()}, status_code=201)

    @app.get("/api/sandbox/faults", tags=["sandbox"])
    async def list_faults() -> dict[str, Any]:
        return {"items": faults.pending()}

    @app.post("/api/sandbox/reset", tags=["sandbox"])
    async def reset() -> dict[str, Any]:
        sandbox.reset()
        return {"reset": True}
