"""The agent service: FastAPI with the REST API (`api/`), the Gradio adapter (`gradio/`)
mounted at /api/agent/gradio and the MCP endpoint (`mcp/`) at /api/agent/mcp; each calls the
chat domain through what `wiring` built."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from agentchat import heap
from agentchat.agent.api.main import api_router
from agentchat.agent.gradio import mount
from agentchat.agent.gradio.file_guard import gradio_upload_paths
from agentchat.agent.mcp import endpoint as mcp
from agentchat.agent.metrics import watch_service_token
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage.db import STORAGE_ERRORS
from agentchat.agent.wiring import ServiceHolder, build_services
from agentchat.asgi import BodyLimitMiddleware
from agentchat.db import REQUIRED_SCHEMA, resolve_database_url, wait_for_schema
from agentchat.errors import LocalError
from agentchat.http_errors import install_error_handlers
from agentchat.telemetry import fastapi_telemetry, setup_telemetry

log = logging.getLogger("agentchat.agent")


def create_app(settings: AgentSettings | None = None) -> FastAPI:
    settings = settings or AgentSettings()
    # Off unless OTEL_* turn it on (agentchat/telemetry.py); before the clients are built.
    setup_telemetry("agentchat-agent")
    holder = ServiceHolder()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.service_token_file:
            watch_service_token(Path(settings.service_token_file))
        if not settings.migrate_on_start:
            # Expand-only: a newer schema (a later release's migrations) is served; an older one
            # waits for the release's migration Job, then refuses (SchemaTooOld).
            version = await wait_for_schema(resolve_database_url(settings),
                                            wait_s=settings.schema_wait_s)
            log.info("database schema at migration %d (this version needs %d)", version,
                     REQUIRED_SCHEMA)
        holder.services = await build_services(settings, holder.uploads)
        frozen = heap.tune(freeze=settings.tuning.gc_freeze,
                           gen0_threshold=settings.tuning.gc_gen0_threshold)
        log.info("garbage collector: thresholds %s, %d objects frozen", gc.get_threshold(), frozen)
        try:
            async with mcp.running(mcp_endpoint):
                yield
        finally:
            await holder.services.aclose()

    # FastAPI's own server span (fastapi_telemetry) wraps every middleware, so it covers the
    # limits too, and continues the caller's trace.
    app = FastAPI(title="AgentChat agent", version="0.1.0", lifespan=lifespan,
                  telemetry=fastapi_telemetry())
    app.state.holder = holder
    # Gradio first: a submit is several requests to it, and each was matched against every
    # REST route before reaching its mount (no REST route lies under the mount path).
    mounted = mount.mount(app, holder, settings)
    app.include_router(api_router)
    # The MCP endpoint and its metadata (agent/mcp/), unless AGENTCHAT_AGENT_MCP_ENABLED=false.
    mcp_endpoint = mcp.mount(app, holder, settings, app.version)
    _refuse_shadowed_routes(app, settings.tuning.mount_path)
    # Every error, whoever raises it, as `{code, detail}`; a database outage is 503.
    install_error_handlers(app, log, unavailable=STORAGE_ERRORS)
    # Added last so it is the outermost middleware: an oversized body is refused (413) before
    # anything buffers it. Gradio's upload route is exempt: its quotas are the file guard's
    # (agent/gradio/upload_quota.py), which counts the body's parts before Gradio writes them.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.tuning.max_body_bytes,
                       exempt=gradio_upload_paths(settings.tuning.mount_path))
    return mounted


class MountPathClash(LocalError, ValueError):
    """The mount path would hide REST routes (the CLI refuses to start, exit code 2)."""


def _refuse_shadowed_routes(app: FastAPI, mount_path: str) -> None:
    """Gradio is matched first, so a REST route under its mount path could never be reached:
    such a mount path is refused at start (every REST route is in the OpenAPI schema)."""
    prefix = mount_path.rstrip("/")
    shadowed = [p for p in app.openapi()["paths"] if p == prefix or p.startswith(prefix + "/")
                or not prefix]
    if shadowed:
        raise MountPathClash(f"AGENTCHAT_AGENT_TUNING__MOUNT_PATH {mount_path!r} would hide "
                             f"the REST routes {', '.join(sorted(shadowed)[:3])}: choose a path "
                             "of its own")
