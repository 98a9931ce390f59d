"""The Gradio app mounted at /api/agent/gradio: the `/chat` API (docs/protocol.md §1–§2), a built-in
page for people who open it in a browser (`page.py`).

`/chat` is a `gr.api` endpoint, so its seven inputs keep their names and defaults for both
positional and named calls. The page is built in `page.py`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from typing import Any

import gradio as gr

from agentchat.agent.chat.page import build_page
from agentchat.agent.chat.stream import run_chat
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
                holder.get().chat, message=message, action=action,
                conversation_id=conversation_id, uicontext=uicontext, user_id=user_id,
                user_jwt=user_jwt, env_id=env_id,
                headers=request.headers if request else None,
                session=(request.session_hash if request else None) or "anonymous",
            ):
                yield event

        chat.__annotations__["return"] = dict[str, Any]  # gr.api types the stream's items
        gr.api(chat, api_name="chat", concurrency_limit=settings.chat_concurrency)
        build_page(holder, settings)
    built: gr.Blocks = blocks
    return built
