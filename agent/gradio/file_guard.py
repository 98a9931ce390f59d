"""The guard in front of Gradio's upload, file and queue routes (both apps under the mount):
files on `/chat` come only from Gradio's upload folder, and only from their uploader.

    POST …/gradio_api/upload ─ a valid user token, else 401; the quotas (upload_quota.py:
                               413/429 before Gradio writes anything); the paths Gradio
                               answers are recorded in the owners' book (chat/attachments.py)
                               under the token's `sub`
    GET  …/file=…            ─ another user's upload is 404
    POST …/queue/join, call… ─ a FileData path outside the upload folder is 422
                               INVALID_REQUEST before Gradio copies or hashes anything
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentchat.agent.chat import (
    PerMinute,
    UploadBook,
    UploadLimits,
    UploadRefused,
    no_links,
    upload_key,
)
from agentchat.agent.gradio.upload_quota import take
from agentchat.agent.settings import PAGE_SUBPATH
from agentchat.asgi import read_body, replay
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.http_errors import error_response


def gradio_upload_paths(mount_path: str) -> frozenset[str]:
    """Gradio's upload route under the mount (Gradio's routes module: `POST /gradio_api/upload`), of
    the `/chat` app and of the page's app (PAGE_SUBPATH)."""
    root = mount_path.rstrip("/")
    bases = [root + "/gradio_api/upload", root + PAGE_SUBPATH + "/gradio_api/upload"]
    return frozenset({p for b in bases for p in (b, b + "/")})


def _foreign_file(value: Any) -> bool:
    """Any FileData (Gradio's `meta._type` tag, which makes Gradio copy the path into its cache)
    whose path is not inside the upload folder, or a link out of it."""
    if isinstance(value, list):
        return any(_foreign_file(v) for v in value)
    if not isinstance(value, dict):
        return False
    meta = value.get("meta")
    if isinstance(meta, dict) and meta.get("_type") == "gradio.FileData":
        path = value.get("path")
        key = upload_key(path)
        if key is None or not no_links(str(path), key):
            return True
    return any(_foreign_file(v) for v in value.values())


def _file_route_key(route: str) -> str | None:
    """The upload a `/file=…` (or `/file/…`) route names; Gradio resolves it the same way,
    relative to the working directory."""
    return upload_key(os.path.abspath(route[len("/file="):]))


class GradioFileGuard:
    """ASGI middleware for the Gradio mount (see the module docstring).

    Gradio checks FileData paths only for launched apps, and a mounted app is never launched;
    main.py turns that check on, and this guard answers the request itself, before the queue,
    with the docs/protocol.md §5 shape, so no path outside the upload folder is ever opened."""

    def __init__(self, app: ASGIApp, *, mount_path: str,
                 user_of: Callable[[Headers], str | None], limits: UploadLimits,
                 book: UploadBook) -> None:
        self.app = app
        self.book = book  # the process's owners' book (wiring.py ServiceHolder)
        self.prefix = mount_path.rstrip("/")
        self.user_of = user_of  # the verified token's sub, or None
        self.limits = limits
        self.rate = PerMinute(limits.per_minute, "uploads")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(self.prefix + "/"):
            return await self.app(scope, receive, send)
        route = path[len(self.prefix):]
        if route.startswith(PAGE_SUBPATH + "/"):  # the page's own app, under the mount
            route = route[len(PAGE_SUBPATH):]
        route = route.removeprefix("/gradio_api")
        method = scope["method"]
        if route.rstrip("/") == "/upload" or route.startswith(("/file=", "/file/")):
            if method == "OPTIONS":  # a CORS preflight carries no token
                return await self.app(scope, receive, send)
            sub = self.user_of(Headers(scope=scope))
            if sub is None:
                return await error_response(401, ErrorCode.UNAUTHORIZED,
                                            "a valid user token is required")(scope, receive, send)
            if route.startswith("/file"):
                key = _file_route_key(route)
                # Another user's upload is not served either.
                if key is not None and self.book.known(key) and not self.book.owns(key, sub):
                    return await error_response(404, ErrorCode.NOT_FOUND,
                                                "no such file")(scope, receive, send)
                return await self.app(scope, receive, send)
            if method != "POST":
                return await self.app(scope, receive, send)
            return await self._upload(scope, receive, send, sub)
        if method != "POST":
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        # Most bodies name no file: skip parsing them twice (JSON could spell the tag with
        # \u escapes, so a body with any escape is parsed).
        if b"FileData" in body or b"\\u" in body:
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None  # Gradio refuses it on its own
            if _foreign_file(doc):
                return await error_response(
                    422, ErrorCode.INVALID_REQUEST,
                    "a file must be uploaded first (…/gradio_api/upload)")(scope, receive, send)
        await self.app(scope, replay(body, receive), send)

    async def _upload(self, scope: Scope, receive: Receive, send: Send, sub: str) -> None:
        """Gradio sees an upload only once it was counted whole within the quotas
        (agent/chat/upload_book.py), and its room is held until Gradio answered."""
        try:
            self.rate.admit(sub)
        except AgentChatError as e:
            return await error_response(429, e.code, e.detail, {
                "retry-after": str(e.retry_after or 1)})(scope, receive, send)
        try:
            read = await take(self.book, sub, receive, Headers(scope=scope), self.limits)
            if read is None:
                return  # the client left before sending it all
            body, sizes = read
        except UploadRefused as e:
            # The rest of a refused body is never read: close the connection after answering.
            return await error_response(e.status, e.code, e.detail, {"connection": "close"})(
                scope, receive, send)
        try:
            await self.app(scope, replay(body, receive), self._recording(send, sub, sizes))
        finally:
            self.book.release(sub, len(sizes), sum(sizes))

    def _recording(self, send: Send, sub: str, sizes: list[int]) -> Send:
        """Record the uploaded paths before the last byte of Gradio's answer leaves, so the
        client cannot name them before they are recorded. Gradio answers one path per file
        part, in their order, so each gets the size counted on the way in."""
        status, chunks = 0, []

        async def wrapped(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and status == 200:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    try:
                        paths = json.loads(b"".join(chunks))
                    except ValueError:
                        paths = []
                    for p, size in zip(paths if isinstance(paths, list) else [], sizes,
                                       strict=False):
                        key = upload_key(p)
                        if key is not None:
                            self.book.record(key, sub, size)
            await send(message)

        return wrapped
