"""The Gradio adapter on the agent's FastAPI app: `/chat` at the mount path, the built-in
page's app under it (when on), and the guards Gradio's own routes need (uploads and files,
sessions, the page's headers and redirect). `create_app` (agent/main.py) calls `mount`.
"""

from __future__ import annotations

import gradio as gr
from fastapi import FastAPI
from starlette.datastructures import Headers

from agentchat.agent.chat import UploadLimits
from agentchat.agent.gradio.blocks import build_blocks, build_page_blocks
from agentchat.agent.gradio.chat_queue import ChatQueue
from agentchat.agent.gradio.file_guard import GradioFileGuard
from agentchat.agent.gradio.page_headers import PageRedirect, PageSecurityHeaders
from agentchat.agent.gradio.session_guard import GradioSessionGuard
from agentchat.agent.settings import PAGE_SUBPATH, AgentSettings
from agentchat.agent.wiring import ServiceHolder
from agentchat.errors import AgentChatError
from agentchat.identity import bearer


def mount(app: FastAPI, holder: ServiceHolder, settings: AgentSettings) -> FastAPI:
    """Mount the Gradio apps and add their guards to `app`; the app to serve (Gradio's
    mount returns it)."""
    mounted = _mount_gradio(app, holder, settings)

    def sub_of(token: str | None) -> str | None:
        try:
            return holder.get().verifier.verify(token).sub
        except AgentChatError:
            return None

    def user_of(headers: Headers) -> str | None:
        return sub_of(bearer(headers))

    # FileData and file routes, uploads and their quotas (file_guard.py).
    app.add_middleware(GradioFileGuard, mount_path=settings.tuning.mount_path, user_of=user_of,
                       limits=UploadLimits.from_settings(settings), book=holder.uploads)
    # Gradio's own routes act on the caller's sessions only (session_guard.py).
    app.add_middleware(GradioSessionGuard, mount_path=settings.tuning.mount_path, user_of=sub_of,
                       page_open=settings.is_dev and settings.page_on,
                       page_mounted=settings.page_on)
    if settings.page_on:
        # The page's responses carry its Content-Security-Policy (page_headers.py).
        app.add_middleware(PageSecurityHeaders,
                           prefix=settings.tuning.mount_path.rstrip("/") + PAGE_SUBPATH)
        # A browser opening the mount path gets the page (its own app under it).
        app.add_middleware(PageRedirect, mount_path=settings.tuning.mount_path)
    return mounted


def _mount_gradio(app: FastAPI, holder: ServiceHolder, settings: AgentSettings) -> FastAPI:
    """`/chat` at the mount path and, when the page is on, the built-in page's own app under it
    (PAGE_SUBPATH, mounted first so its routes are matched before the `/chat` app's): see
    blocks.py. Off, nothing is mounted there: its paths are the `/chat` app's unknown ones."""
    if settings.page_on:
        _mount_one(app, build_page_blocks(holder, settings),
                   settings.tuning.mount_path.rstrip("/") + PAGE_SUBPATH, settings)
    blocks = build_blocks(holder, settings)
    # /chat's queue routes (chat_queue.py), matched before the mount's.
    tuning = settings.tuning
    queue = ChatQueue(holder, chat_fn_index(blocks), tuning.chat_concurrency,
                      tuning.chat_unread_session_s, tuning.chat_sessions_max)
    app.include_router(queue.router(settings.tuning.mount_path))
    return _mount_one(app, blocks, settings.tuning.mount_path, settings)


def chat_fn_index(blocks: gr.Blocks) -> int:
    """The `fn_index` clients send for `/chat` (the config's dependency of api_name chat)."""
    return next(i for i, fn in blocks.fns.items() if fn.api_name == "chat")


def _mount_one(app: FastAPI, blocks: gr.Blocks, path: str, settings: AgentSettings) -> FastAPI:
    # Gradio's queue runs at most `max_threads` jobs at once (40 unless launch() sets it, and
    # mount_gradio_app cannot), whatever the concurrency limits say: 200 conversations ran in
    # five waves of 40, the last starting 30 s late (bench/agent_scale.py).
    blocks.max_threads = max(settings.tuning.chat_concurrency, 40)
    blocks.queue(default_concurrency_limit=settings.tuning.chat_concurrency)
    # Gradio's queue looks for a new job every 1 ms while it has none (and for progress to
    # send every 10 ms): ~4 % of a core per mounted Blocks on an idle replica, measured. A
    # job waits at most `gradio_queue_poll_s` to start instead; we send no progress bars.
    # (No public API: Queue's own attributes, checked by tests/agent/test_gradio_mounts.py.)
    blocks._queue.sleep_when_free = settings.tuning.gradio_queue_poll_s
    blocks._queue.progress_update_sleep_when_free = max(settings.tuning.gradio_queue_poll_s, 0.1)

    # --- files only from Gradio's uploads (agent/chat/attachments.py) ------------------------
    # A mounted app gets its path rules and upload limit only from these arguments. Gradio checks
    # FileData inputs against its upload folder only once `has_launched` is set
    # (processing_utils._check_allowed), which launch() sets and mount_gradio_app does not:
    # without it a FileData-tagged /etc/passwd was copied into the cache, unauthenticated, and
    # /dev/zero was hashed forever on the event loop. The guard answers such input with
    # INVALID_REQUEST before Gradio's queue, and asks a user token on upload and file routes.
    mounted: FastAPI = gr.mount_gradio_app(app, blocks, path=path, allowed_paths=[],
                                  blocked_paths=[str(settings.data_dir.resolve())],
                                  max_file_size=settings.tuning.max_file_bytes,
                                  # Never Gradio's own MCP server, whatever GRADIO_MCP_SERVER
                                  # says: it would make /chat an ungated tool (agent/mcp/ is
                                  # the MCP endpoint, through the gate).
                                  mcp_server=False)
    blocks.has_launched = True
    return mounted
