"""Serve web/build at /api/agent/ui/ in front of a real stack, as the agent will (H-ui's route):
config.json, POST dev/token, and every other /api/* request proxied to the agent, streaming.

A manual check of the page before the agent serves it; not part of `npm test`:

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \
        ../../../.venv/bin/python serve.py 8765    # then open http://127.0.0.1:8765/api/agent/ui/
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentchat.db import migrate_url
from testkit.stack import running_stack
from testkit.support import create_database, drop_database

BUILD = Path(__file__).resolve().parents[2] / "build"
USERS = [{"id": "alice", "label": "Alice (admin)"}, {"id": "bob", "label": "Bob (editor)"},
         {"id": "carol", "label": "Carol (viewer)"}]


def app_for(stack, agent_url: str) -> Starlette:  # type: ignore[no-untyped-def]
    client = httpx.AsyncClient(base_url=agent_url, timeout=None)

    async def config(_: Request) -> JSONResponse:
        return JSONResponse({"api_base": "/api/agent", "gradio_path": "/api/agent/gradio",
                             "dev": True, "demo_users": USERS})

    async def token(request: Request) -> JSONResponse:
        user = (await request.json())["user"]
        return JSONResponse({"token": stack.token(user)})

    async def proxy(request: Request) -> StreamingResponse:
        # Host kept: Gradio derives its root URL from it.
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        req = client.build_request(request.method, request.url.path, params=request.query_params,
                                   headers=headers, content=await request.body())
        resp = await client.send(req, stream=True)
        out = {k: v for k, v in resp.headers.items()
               if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")}
        return StreamingResponse(resp.aiter_raw(), status_code=resp.status_code, headers=out,
                                 background=None)

    return Starlette(routes=[
        Route("/api/agent/ui/config.json", config),
        Route("/api/agent/ui/dev/token", token, methods=["POST"]),
        Mount("/api/agent/ui", StaticFiles(directory=BUILD, html=True)),
        Route("/{path:path}", proxy, methods=["GET", "POST", "DELETE", "PATCH", "PUT"]),
    ])


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
    server = os.environ["TEST_DATABASE_URL"]
    url = create_database(server)
    try:
        asyncio.run(migrate_url(url))
        with tempfile.TemporaryDirectory() as tmp, running_stack(
                Path(tmp) / "data", url, AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.03") as s:
            print(f"page: http://127.0.0.1:{port}/api/agent/ui/  agent: {s.agent.url}", flush=True)
            uvicorn.run(app_for(s, s.agent.url), host="127.0.0.1", port=port, log_level="warning")
    finally:
        drop_database(server, url)


if __name__ == "__main__":
    main()
