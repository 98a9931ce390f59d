"""`/api/agent/ui/*`: the people's page (web/) as static files, its config, and in dev
the demo users' tokens.

    GET  /api/agent/ui/             index.html (never cached) with a Content-Security-Policy
    GET  /api/agent/ui/approvals/   the same page, showing the approvals inbox (protocol.md §11)
    GET  /api/agent/ui/approvals/{id}  the same page, showing one approval (a card's approve_url)
    GET  /api/agent/ui/calls/{id}   the same page, showing one MCP call (its approve_url, §12)
    GET  /api/agent/ui/assets/...   Vite's content-hashed files (cached for a year, immutable)
    GET  /api/agent/ui/config.json  where the page finds the agent, and the demo users in dev
    POST /api/agent/ui/dev/token    {"user": "alice"} -> {"token": ...}; dev only, 404 otherwise

Served only when `AGENTCHAT_AGENT_UI_ENABLED` says so (unset: on in dev, off otherwise); off,
every path here is the same 404 an unknown path gets. In production the page holds no token of
its own: the ingress in front (e.g. oauth2-proxy) injects `Authorization` into its requests
(charts/agentchat/README.md, "The page behind oauth2-proxy").
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Depends, Response
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException

from agentchat.agent.api.deps import DevIssuer, Settings
from agentchat.agent.chat import APPROVAL_ID, CALL_ID
from agentchat.agent.csp import content_security_policy
from agentchat.agent.settings import AgentSettings
from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response
from agentchat.identity import DEMO_USERS

router = APIRouter(prefix="/api/agent/ui", tags=["ui"])

IMMUTABLE = "public, max-age=31536000, immutable"  # Vite names assets by content hash
NO_STORE = "no-store"
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
          ".svg": "image/svg+xml", ".woff2": "font/woff2", ".json": "application/json",
          ".map": "application/json", ".ico": "image/x-icon", ".png": "image/png"}


@lru_cache(maxsize=4)
def _index(path: Path, mtime_ns: int) -> tuple[bytes, str]:
    """index.html and its CSP, read again only when the file changes (a rebuild)."""
    html = path.read_bytes()
    return html, content_security_policy(html.decode("utf-8", errors="replace"))


def _built(settings: AgentSettings) -> Path | JSONResponse:
    """The built page's folder; 404 while the page is off; a 503 saying how to build it when
    the folder has no index.html."""
    if not settings.ui_on:
        raise HTTPException(404)  # exactly an unknown path's answer: nothing to discover
    root = settings.tuning.ui_dir.resolve()
    if not (root / "index.html").is_file():
        return error_response(503, ErrorCode.INTERNAL,
                              "the page is not built: run `make web` (or point "
                              "AGENTCHAT_AGENT_TUNING__UI_DIR at a built web/build)")
    return root


def _security_headers(response: Response) -> Response:
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


@router.get("")
async def ui_root(settings: Settings) -> Response:
    """The page's asset URLs are relative: it must be loaded with its trailing slash."""
    return _with_slash(settings, "ui/")


@router.get("/")
async def index(settings: Settings) -> Response:
    return _page(settings, depth=0)


@router.get("/approvals")
async def approvals_root(settings: Settings) -> Response:
    """Like the page's root: its relative URLs need the trailing slash."""
    return _with_slash(settings, "approvals/")


def _with_slash(settings: AgentSettings, location: str) -> Response:
    """A 308 to the folder; the relative Location keeps whatever host and scheme the browser
    used (a proxy in front)."""
    root = _built(settings)
    if isinstance(root, Response):
        return root
    return Response(status_code=308, headers={"Location": location})


@router.get("/approvals/")
async def approvals_inbox(settings: Settings) -> Response:
    """The approvals inbox: the same index.html; the page routes by its own path."""
    return _page(settings, depth=1)


@router.get("/approvals/{approval_id}")
async def approval_page(approval_id: str, settings: Settings) -> Response:
    """One approval's page (the card's `approve_url`). The id's shape is checked here, so
    anything else under approvals/ is the 404 of an unknown path; whether the approval exists
    and who may see it is the REST API's answer to the signed-in page."""
    if not APPROVAL_ID.match(approval_id):
        raise HTTPException(404)
    return _page(settings, depth=1)


@router.get("/calls/{call_id}")
async def call_page(call_id: str, settings: Settings) -> Response:
    """One stored MCP call's page (its `approve_url`): as for an approval, only the id's shape
    is checked here; whose call it is, is the REST API's answer to the signed-in page."""
    if not CALL_ID.match(call_id):
        raise HTTPException(404)
    return _page(settings, depth=1)


def _page(settings: AgentSettings, *, depth: int) -> Response:
    """index.html with its CSP; `depth` folders below the page's root, its relative asset
    URLs (Vite's `base: "./"`) are pointed that many folders up, so the browser loads the one
    copy under `assets/` (a `<base>` element would need a looser `base-uri`)."""
    root = _built(settings)
    if isinstance(root, Response):
        return root
    path = root / "index.html"
    html, csp = _index(path, path.stat().st_mtime_ns)
    if depth:
        up = b"../" * depth
        html = html.replace(b'="./assets/', b'="' + up + b"assets/")
    response = Response(html, media_type="text/html; charset=utf-8",
                        headers={"Cache-Control": NO_STORE, "Content-Security-Policy": csp})
    return _security_headers(response)


class DemoUser(BaseModel):
    id: str
    label: str


class UiConfig(BaseModel):
    api_base: str
    gradio_path: str
    assistant_base: str  # the conversations REST API (docs/protocol.md §9)
    dev: bool
    demo_users: list[DemoUser]
    # Shown before a file is sent (docs/protocol.md §1 limits), and the /chat heartbeat the
    # panel expects (§2): two missed beats are a disconnect.
    max_files: int
    max_file_bytes: int
    max_files_total_bytes: int
    heartbeat_s: float


@router.get("/config.json", response_model=UiConfig)
async def config(settings: Settings) -> JSONResponse:
    """Paths, not URLs: the page resolves them against its own origin, so it works through
    any proxy that keeps the paths."""
    if not settings.ui_on:
        raise HTTPException(404)
    users = [DemoUser(id=u, label=f"{u} ({', '.join(roles)})")
             for u, roles in DEMO_USERS.items()] if settings.is_dev else []
    body = UiConfig(api_base="/api/agent", gradio_path=settings.tuning.mount_path,
                    assistant_base="/api/assistant",
                    dev=settings.is_dev, demo_users=users, max_files=settings.tuning.max_files,
                    max_file_bytes=settings.tuning.max_file_bytes,
                    max_files_total_bytes=settings.tuning.max_files_total_bytes,
                    heartbeat_s=settings.tuning.stream_heartbeat_s)
    return JSONResponse(body.model_dump(), headers={"Cache-Control": NO_STORE})


class DevTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(max_length=64)

    @field_validator("user")
    @classmethod
    def _known(cls, user: str) -> str:
        if user not in DEMO_USERS:
            raise ValueError(f"not a demo user; one of {', '.join(DEMO_USERS)}")
        return user


class DevToken(BaseModel):
    token: str


def _dev_only(issuer: DevIssuer, settings: Settings) -> None:
    """A dependency, so it runs before the body is validated: outside dev the route answers
    404 whatever it is sent, like any unknown path."""
    if issuer is None or not settings.ui_on:
        raise HTTPException(404)


@router.post("/dev/token", response_model=DevToken, dependencies=[Depends(_dev_only)])
async def dev_token(body: DevTokenRequest, issuer: DevIssuer) -> JSONResponse:
    """A demo user's token from the dev issuer, for the page's user picker."""
    assert issuer is not None  # _dev_only
    token = issuer.mint(body.user)
    return JSONResponse({"token": token}, headers={"Cache-Control": NO_STORE})


@router.get("/{path:path}")
async def asset(path: str, settings: Settings) -> Response:
    root = _built(settings)
    if isinstance(root, Response):
        return root
    file = _file_under(root, path)
    immutable = path.startswith("assets/")
    response = FileResponse(file, media_type=_TYPES.get(file.suffix),
                            headers={"Cache-Control": IMMUTABLE if immutable else "no-cache"})
    return _security_headers(response)


def _file_under(root: Path, path: str) -> Path:
    """A file inside the build folder, never outside it (no dot segments, no symlink out)."""
    parts = path.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        raise HTTPException(404)
    file = (root / path).resolve()
    if not file.is_relative_to(root) or not file.is_file():
        raise HTTPException(404)
    return file
