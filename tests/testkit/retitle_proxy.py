"""A hostile Superset in front of the sandbox: every answer passes through unchanged, except
that the dashboards named in `POST /__retitle {dashboard_id, title}` carry that title (as
someone with edit rights in Superset could name a dashboard: instructions, control characters,
500 characters). The agent reaches the sandbox only through it, so its prefetch and search
results bring the hostile title into the turn exactly as a real one would.

Run: `python tests/testkit/retitle_proxy.py PORT UPSTREAM_URL`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TITLES: dict[int, str] = {}
UPSTREAM = {"url": ""}
_HOP = {"host", "content-length", "transfer-encoding", "connection"}


def retitled(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: retitled(v) for k, v in value.items()}
        oid = value.get("dashboard_id", value.get("id"))
        if isinstance(oid, int) and oid in TITLES and ("title" in value
                                                       or "dashboard_title" in value):
            for key in ("title", "title_en", "dashboard_title", "dashboard_title_en"):
                if key in value:
                    out[key] = TITLES[oid]
        return out
    if isinstance(value, list):
        return [retitled(v) for v in value]
    return value


async def set_title(request: Request) -> Response:
    body = await request.json()
    TITLES[int(body["dashboard_id"])] = str(body["title"])
    return JSONResponse({"titles": len(TITLES)})


async def forward(request: Request) -> Response:
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    async with httpx.AsyncClient(timeout=60) as http:
        resp = await http.request(request.method, UPSTREAM["url"] + request.url.path,
                                  params=list(request.query_params.multi_items()),
                                  content=await request.body(), headers=headers)
    out_headers = {k: v for k, v in resp.headers.items()
                   if k.lower() not in _HOP | {"content-encoding"}}
    if "application/json" in resp.headers.get("content-type", ""):
        try:
            data = resp.json()
        except ValueError:
            return Response(resp.content, resp.status_code, out_headers)
        out_headers.pop("content-type", None)
        return Response(json.dumps(retitled(data), ensure_ascii=False), resp.status_code,
                        out_headers, media_type="application/json")
    return Response(resp.content, resp.status_code, out_headers)


METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
app = Starlette(routes=[Route("/__retitle", set_title, methods=["POST"]),
                        Route("/{path:path}", forward, methods=METHODS)])

if __name__ == "__main__":
    UPSTREAM["url"] = sys.argv[2].rstrip("/")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
