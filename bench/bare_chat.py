"""The baseline of the streaming benchmarks: a bare Gradio ChatInterface, served like the agent
(FastAPI + uvicorn, mounted at the same path), that streams back the text it is sent, one event
per token, split exactly as the offline planner splits its answers.

Not a benchmark itself (bench/__main__.py skips it); the benchmarks start it with
`bare_server(...)` from bench/common.py:

    python bench/bare_chat.py --port 7999 [--token-delay 0.0333]
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import gradio as gr
import uvicorn
from fastapi import FastAPI

# The offline planner's own tokenizer (agent/graph/offline/planner.py, _TOKEN_RE): same text,
# same tokens.
TOKEN_RE = re.compile(r"\S+\s*|\s+")
MOUNT_PATH = "/api/agent/gradio"


def build_app(token_delay_s: float) -> FastAPI:
    async def respond(message: str, history: list[Any]) -> AsyncIterator[str]:
        text = ""
        for token in TOKEN_RE.findall(message):
            # sleep(0) too: a model's stream awaits between tokens, and without it the first
            # events wait in Gradio's queue until the generator is done.
            await asyncio.sleep(token_delay_s)
            text += token
            yield text

    app = FastAPI()

    @app.get("/livez")
    async def livez() -> dict[str, bool]:
        return {"ok": True}

    # Unlimited concurrency, as the agent's /chat (AGENTCHAT_AGENT_TUNING__CHAT_CONCURRENCY=1000).
    demo = gr.ChatInterface(respond, api_name="chat", concurrency_limit=None)
    # As the agent does (agent/main.py): Gradio's queue otherwise runs only 40 jobs at once.
    demo.max_threads = 1000
    demo.queue(default_concurrency_limit=None)
    return gr.mount_gradio_app(app, demo, path=MOUNT_PATH)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-delay", type=float, default=0.0)
    opts = parser.parse_args()
    uvicorn.run(build_app(opts.token_delay), host="127.0.0.1", port=opts.port,
                log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
