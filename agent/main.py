"""The agent service: FastAPI with the REST API, and Gradio mounted at /api/agent/gradio."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import gradio as gr
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException

from agentchat.agent import heap
from agentchat.agent.api.errors import code_for_status, error_response
from agentchat.agent.api.limits import BodyLimitMiddleware, gradio_upload_paths
from agentchat.agent.api.main import api_router
from agentchat.agent.chat.blocks import PageRedirect, build_blocks, build_page_blocks
from agentchat.agent.chat.page_csp import PageSecurityHeaders
from agentchat.agent.chat.sessions import GradioSessionGuard
from agentchat.agent.chat.upload_quota import UploadLimits
from agentchat.agent.chat.uploads import GradioFileGuard
from agentchat.agent.metrics import watch_service_token
from agentchat.agent.settings import PAGE_SUBPATH, AgentSettings
from agentchat.agent.storage.db import STORAGE_ERRORS
from agentchat.agent.wiring import ServiceHolder, build_services
from agentchat.db import REQUIRED_SCHEMA, resolve_database_url, wait_for_schema
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import bearer
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
        holder.services = await build_services(settings)
        frozen = heap.tune(freeze=settings.gc_freeze, gen0_threshold=settings.gc_gen0_threshold)
        log.info("garbage collector: thresholds %s, %d objects frozen", gc.get_threshold(), frozen)
        try:
            yield
        finally:
            await holder.services.aclose()

    # FastAPI's own server span (fastapi_telemetry) wraps every middleware, so it covers the
    # limits too, and continues the caller's trace.
    app = FastAPI(title="AgentChat agent", version="0.1.0", lifespan=lifespan,
                  telemetry=fastapi_telemetry())
    app.state.holder = holder
    app.include_router(api_router)

    _install_error_handlers(app)
    mounted = _mount_gradio(app, holder, settings)

    def sub_of(token: str | None) -> str | None:
        try:
            return holder.get().verifier.verify(token).sub
        except AgentChatError:
            return None

    def user_of(headers: Headers) -> str | None:
        return sub_of(bearer(headers))

    # The guard on the Gradio mount (see _mount_gradio): FileData and file routes.
    app.add_middleware(GradioFileGuard, mount_path=settings.mount_path, user_of=user_of,
                       limits=UploadLimits.from_settings(settings))
    # Gradio's own routes act on the caller's sessions only (agent/chat/sessions.py).
    app.add_middleware(GradioSessionGuard, mount_path=settings.mount_path, user_of=sub_of,
                       page_open=settings.is_dev and settings.page_on,
                       page_mounted=settings.page_on)
    if settings.page_on:
        # The page's responses carry its Content-Security-Policy (agent/chat/page_csp.py).
        app.add_middleware(PageSecurityHeaders,
                           prefix=settings.mount_path.rstrip("/") + PAGE_SUBPATH)
        # A browser opening the mount path gets the page (its own app under it).
        app.add_middleware(PageRedirect, mount_path=settings.mount_path)

    # --- request-body limit (agent/api/limits.py) --------------------------------------------
    # Added last so it is the outermost middleware: an oversized body is refused (413) before
    # anything buffers it. Gradio's upload route is exempt: its quotas are GradioFileGuard's
    # (agent/chat/upload_quota.py), which counts the body's parts before Gradio writes them.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       exempt=gradio_upload_paths(settings.mount_path))
    return mounted


def _install_error_handlers(app: FastAPI) -> None:
    """Every error, whoever raises it, as `{code, detail}` (agent/api/errors.py)."""

    @app.exception_handler(AgentChatError)
    async def _agentchat_error(_: Request, exc: AgentChatError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return error_response(exc.http_status, exc.code, exc.detail, headers)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        # Unknown paths, wrong methods, unparseable bodies: the same {code, detail} shape.
        return error_response(exc.status_code, code_for_status(exc.status_code),
                              str(exc.detail), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", []))
        return error_response(422, ErrorCode.INVALID_REQUEST,
                              f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, STORAGE_ERRORS):
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE,
                                  "the database is unreachable")
        log.exception("unexpected error")
        return error_response(500, ErrorCode.INTERNAL, "internal error")


def _mount_gradio(app: FastAPI, holder: ServiceHolder, settings: AgentSettings) -> FastAPI:
    """`/chat` at the mount path and, when the page is on, the built-in page's own app under it
    (PAGE_SUBPATH, mounted first so its routes are matched before the `/chat` app's): see
    blocks.py. Off, nothing is mounted there: its paths are the `/chat` app's unknown ones."""
    if settings.page_on:
        _mount_one(app, build_page_blocks(holder, settings),
                   settings.mount_path.rstrip("/") + PAGE_SUBPATH, settings)
    return _mount_one(app, build_blocks(holder, settings), settings.mount_path, settings)


def _mount_one(app: FastAPI, blocks: gr.Blocks, path: str, settings: AgentSettings) -> FastAPI:
    # Gradio's queue runs at most `max_threads` jobs at once (40 unless launch() sets it, and
    # mount_gradio_app cannot), whatever the concurrency limits say: 200 conversations ran in
    # five waves of 40, the last starting 30 s late (bench/agent_scale.py).
    blocks.max_threads = max(settings.chat_concurrency, 40)
    blocks.queue(default_concurrency_limit=settings.chat_concurrency)

    # --- files only from Gradio's uploads (agent/chat/uploads.py) --------------------------------
    # A mounted app gets its path rules and upload limit only from these arguments. Gradio checks
    # FileData inputs against its upload folder only once `has_launched` is set
    # (processing_utils._check_allowed), which launch() sets and mount_gradio_app does not:
    # without it a FileData-tagged /etc/passwd was copied into the cache, unauthenticated, and
    # /dev/zero was hashed forever on the event loop. The guard answers such input with
    # INVALID_REQUEST before Gradio's queue, and asks a user token on upload and file routes.
    mounted: FastAPI = gr.mount_gradio_app(app, blocks, path=path, allowed_paths=[],
                                  blocked_paths=[str(settings.data_dir.resolve())],
                                  max_file_size=settings.max_file_bytes)
    blocks.has_launched = True
    return mounted
