"""The Gradio apps: the `/chat` API (docs/protocol.md §1–§2) mounted at /api/agent/gradio, and
the built-in page for people who open it in a browser (`page.py`), a Blocks of its own mounted
under it at `PAGE_SUBPATH`, where a browser opening the mount path is redirected.

`/chat` is a `gr.api` endpoint, so its seven inputs keep their names and defaults for both
positional and named calls. It has a Blocks without components because Gradio keeps, per
session (every client that connects), the config of every block of the Blocks it calls, for
up to `state_session_capacity` sessions: with the page's 27 blocks that was 36 KB and 3.4 ms
of CPU a session, with `/chat`'s own 9 (its inputs and output, and a hidden chatbot that
declares the examples) it is 10 KB and 0.85 ms.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from typing import Any

import gradio as gr

from agentchat.agent.gradio.chat_api import run_chat
from agentchat.agent.gradio.page import EXAMPLES, build_page
from agentchat.agent.settings import AgentSettings
from agentchat.agent.wiring import ServiceHolder


def _fail_fast_matplotlib() -> None:
    """Gradio wraps every event of a stream in MatplotlibBackendMananger, which imports
    matplotlib; when it is not installed, each failed import searches sys.path again (7% of the
    agent's CPU with 200 streams, py-spy). A None entry makes that import fail at once."""
    if "matplotlib" not in sys.modules and importlib.util.find_spec("matplotlib") is None:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]


def build_blocks(holder: ServiceHolder, settings: AgentSettings) -> gr.Blocks:
    _fail_fast_matplotlib()
    with gr.Blocks(title="AgentChat") as blocks:

        async def chat(
            message: dict[str, Any] | str,
            action: str | None = None,
            conversation_id: str | None = None,
            uicontext: str | None = None,
            user_id: str | None = None,
            user_jwt: str | None = None,
            env_id: str | None = None,
            request: gr.Request = None,  # type: ignore[assignment]
        ) -> AsyncIterator[dict[str, Any]]:
            """One submit of the chat: a message, a card's answer, or a retry."""
            async for event in run_chat(
                holder.get(), message=message, action=action,
                conversation_id=conversation_id, uicontext=uicontext, user_id=user_id,
                user_jwt=user_jwt, env_id=env_id,
                headers=request.headers if request else None,
                session=(request.session_hash if request else None) or "anonymous",
            ):
                yield event

        chat.__annotations__["return"] = dict[str, Any]  # gr.api types the stream's items
        gr.api(chat, api_name="chat", concurrency_limit=settings.tuning.chat_concurrency)
        # docs/protocol.md §1: the chatbot's `examples` in this app's config are the
        # frontend's welcome chips (the page's chatbot shows the same ones).
        gr.Chatbot(examples=EXAMPLES, visible=False, elem_id="agentchat-examples")
    built: gr.Blocks = blocks
    return built


def build_page_blocks(holder: ServiceHolder, settings: AgentSettings) -> gr.Blocks:
    """The built-in page's app (mounted at the mount path + PAGE_SUBPATH)."""
    _fail_fast_matplotlib()
    with gr.Blocks(title="AgentChat") as page:
        build_page(holder, settings)
    built: gr.Blocks = page
    return built
