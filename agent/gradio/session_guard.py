"""Gradio's own routes act only on the caller's own sessions (README.md, "Safety properties").

Gradio's queue routes need nothing but a session hash or an event id: whoever held one could
stop another user's turn mid-write (`cancel`) or read their stream (`queue/data`). This guard
binds each session hash, event id and upload id to the `sub` of the first valid user token
that names it, and refuses anyone else:

    POST queue/join, call/{api}, run/{api}, api/{api}
                                 the token in `Authorization`, or /chat's `user_jwt` (slot 5);
                                 a session bound to another user: 404; the event id Gradio
                                 answers is bound to the caller
    GET  queue/data, heartbeat/{session}, stream/{session}/…, call/{api}/{event_id},
         upload_progress;  POST cancel, reset, stream/{event_id}[/close], component_server
                                 the token in `Authorization`: none or invalid on a bound
                                 session 401, another user's 404 NOT_FOUND (never revealed as
                                 existing); nothing is cancelled, no event is read
    anything Gradio mounts that `category` does not know (run history, monitoring, vibe
    editing, dev reload, a route a new Gradio adds)  404, as an unknown path

A session or event no valid token has named holds only refused submits (the /chat function
answers an invalid token with UNAUTHORIZED, as its stream's one event), so it passes, and the
first valid token binds it. tests/system/test_gradio_sessions.py fails when the mounted app has
a route `category` does not place. In dev the built-in page (PAGE_SUBPATH) answers as its demo
users and the browser sends no token: there its sessions are not bound. The bindings live in
this process (a session is sticky to its replica), capped like the upload owners.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentchat.agent.settings import PAGE_SUBPATH
from agentchat.asgi import read_body, replay
from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response
from agentchat.identity import bearer

# Every route Gradio 6.31 mounts, by what the guard does with it (`category`): `free` names no
# session (configs, assets, the schema, one-shot predictions through the /chat function, which
# checks the token itself), `session` is owner-checked, anything else is refused as unknown
# (fail closed: the run history, monitoring, vibe editing, dev reload, a future route).
_FREE_API = ("/info", "/openapi.json", "/upload", "/startup-events", "/theme.css", "/file=",
             "/file/", "/deep_link", "/queue/status", "/user",
             "/login_check", "/token", "/app_id", "/proxy=", "/custom_component/")
_SESSION_API = ("/queue/join", "/queue/data", "/cancel", "/heartbeat/", "/stream/", "/reset",
                "/upload_progress", "/component_server", "/call/", "/run/", "/api/")
# Submits: the body may name a session (whose state a page function would read), and the
# event id answered becomes the caller's.
_SUBMITS = ("/queue/join", "/call/", "/run/", "/api/")
_CLOSED_ROOT = ("/monitoring", "/login", "/logout", "/gradio_api")


def category(route: str) -> str:
    """`free`, `session` or `closed` for a path under a mount (the page's prefix removed)."""
    if route.startswith("/gradio_api/"):
        api = route[len("/gradio_api"):]
        if api.startswith(_SESSION_API):
            return "session"
        return "free" if api.startswith(_FREE_API) else "closed"
    return "closed" if route.startswith(_CLOSED_ROOT) else "free"


class Bindings:
    """Which user a session hash, event id or upload id belongs to (bounded, oldest out)."""

    def __init__(self, cap: int = 50_000) -> None:
        self.cap = cap
        self._owners: OrderedDict[str, str] = OrderedDict()

    def owner(self, key: str) -> str | None:
        return self._owners.get(key)

    def bind(self, key: str, sub: str) -> None:
        if key not in self._owners:
            self._owners[key] = sub
            while len(self._owners) > self.cap:
                self._owners.popitem(last=False)


class GradioSessionGuard:
    """ASGI middleware on the Gradio mount; see the module docstring."""

    def __init__(self, app: ASGIApp, *, mount_path: str,
                 user_of: Callable[[str | None], str | None], page_open: bool,
                 page_mounted: bool = True) -> None:
        self.app = app
        self.prefix = mount_path.rstrip("/")
        self.page_mounted = page_mounted  # off: PAGE_SUBPATH is an unknown path of /chat's app
        self.user_of = user_of  # a raw token's verified sub, or None
        self.page_open = page_open  # dev: the page's demo users stand in for tokens
        self.bindings = Bindings()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(self.prefix + "/"):
            return await self.app(scope, receive, send)
        route = path[len(self.prefix):]
        page = self.page_mounted and route.startswith(PAGE_SUBPATH + "/")
        route = route[len(PAGE_SUBPATH):] if page else route
        kind = category(route)
        if kind == "closed":
            return await _refuse("no such route")(scope, receive, send)
        api = route[len("/gradio_api"):]
        caller = self.user_of(bearer(Headers(scope=scope)))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if api.startswith("/upload") and caller is not None:  # bound before Gradio sees it
            for upload_id in query.get("upload_id", []):
                self.bindings.bind("upload:" + upload_id, caller)
        if kind == "free" or scope["method"] == "OPTIONS" or (page and self.page_open):
            return await self.app(scope, receive, send)
        if scope["method"] == "POST" and api.startswith(_SUBMITS):
            return await self._submit(scope, receive, send, caller)
        keys = _keys(api, query)
        if keys is None:  # a body names them (cancel, reset, stream inputs, component_server)
            body = await read_body(receive)
            keys = _body_keys(_json(body))
            receive = replay(body, receive)
        for key in keys:
            refusal = self._check(key, caller)
            if refusal is not None:
                return await refusal(scope, receive, send)
        await self.app(scope, receive, send)

    def _check(self, key: str, caller: str | None) -> JSONResponse | None:
        """None when `caller` may act on `key` (binding a session or upload no valid token
        named before), else the refusal (an ASGI app)."""
        owner = self.bindings.owner(key)
        if owner is None:
            if caller is not None and key.startswith(("session:", "upload:")):
                self.bindings.bind(key, caller)
            return None if caller is not None or key != "session:" else _unauthorized()
        if caller is None:
            return _unauthorized()
        return None if owner == caller else _refuse("no such session")

    async def _submit(self, scope: Scope, receive: Receive, send: Send,
                      caller: str | None) -> None:
        """queue/join and call/{api}: the session is the caller's (the header's token, else
        /chat's `user_jwt`); the event id Gradio answers becomes the caller's."""
        body = await read_body(receive)
        doc = _json(body)
        if caller is None and isinstance(doc, dict):
            caller = self.user_of(_payload_token(doc.get("data")))
        session = doc.get("session_hash") if isinstance(doc, dict) else None
        if isinstance(session, str):
            refusal = self._check("session:" + session, caller)
            if refusal is not None:
                return await refusal(scope, receive, send)
        await self.app(scope, replay(body, receive),
                       self._binding_events(send, caller) if caller else send)

    def _binding_events(self, send: Send, caller: str) -> Send:
        chunks: list[bytes] = []

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    answer = _json(b"".join(chunks))
                    if isinstance(answer, dict) and isinstance(answer.get("event_id"), str):
                        self.bindings.bind("event:" + answer["event_id"], caller)
            await send(message)

        return wrapped


def _keys(api: str, query: dict[str, list[str]]) -> list[str] | None:
    """The session, event and upload keys a request's path and query name; None: its body
    names them."""
    parts = api.strip("/").split("/")
    if api.startswith("/queue/data"):
        return ["session:" + s for s in query.get("session_hash", [""])]
    if api.startswith("/heartbeat/"):
        return ["session:" + parts[1]]
    if api.startswith("/upload_progress"):
        return ["upload:" + u for u in query.get("upload_id", [""])]
    if api.startswith("/stream/") and len(parts) > 3:  # GET stream/{session}/{run}/…
        return ["session:" + parts[1]]
    if api.startswith("/stream/"):  # POST stream/{event_id}[/close]
        return ["event:" + parts[1]]
    if api.startswith("/call/"):  # GET call/{api}/{event_id}, call/v2/{api}/{event_id}
        return ["event:" + parts[-1]]
    return None


def _body_keys(body: Any) -> list[str]:
    """cancel {session_hash, fn_index, event_id}, reset {event_id}, component_server
    {session_hash, …}; a body that is not an object names the empty session (refused
    unless a valid token comes with it)."""
    if not isinstance(body, dict):
        return ["session:"]
    keys = []
    if "event_id" in body:
        keys.append("event:" + str(body["event_id"]))
    if "session_hash" in body or not keys:
        keys.append("session:" + str(body.get("session_hash") or ""))
    return keys


def _payload_token(data: Any) -> str | None:
    """/chat's `user_jwt` (input slot 5, docs/protocol.md §1), when the header has none."""
    if isinstance(data, list) and len(data) > 5 and isinstance(data[5], str) and data[5]:
        return data[5]
    if isinstance(data, dict) and isinstance(data.get("user_jwt"), str):
        return str(data["user_jwt"])
    return None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _unauthorized() -> JSONResponse:
    return error_response(401, ErrorCode.UNAUTHORIZED, "a valid user token is required")


def _refuse(detail: str) -> JSONResponse:
    return error_response(404, ErrorCode.NOT_FOUND, detail)
