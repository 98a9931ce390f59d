"""ASGI request bodies: the body limit, a pure middleware in front of every route, and the
two helpers a guard uses to read a body and hand it on (`read_body`, `replay`).

REST bodies and Gradio's `/chat` queue/call bodies are small JSON (16 KB text, 4 KB UIContext),
so anything over `max_body_bytes` (1 MB) is refused with 413 `{code: INVALID_REQUEST, detail}`
before a route (or Gradio) reads it: a declared Content-Length over the limit at once, a body
that streams past it (chunked, or lying about its length) as soon as it does. Gradio's upload
route is exempt: files keep Gradio's own per-file limit (`max_file_size`).

Pure ASGI rather than BaseHTTPMiddleware: no extra task per request, and SSE streams
(`/queue/data`) pass through untouched.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int, exempt: frozenset[str]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in self.exempt:
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers") or []}
        declared = headers.get(b"content-length")
        if declared is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body (GET, HEAD, an SSE stream)
            return
        if declared is not None:
            try:
                if int(declared) > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
            except ValueError:
                pass  # the server rejects a malformed length; count what arrives instead
        # Read the whole body first (at most max_bytes + one chunk): the route then sees either
        # all of it or nothing, and a refusal never races a response already started.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replay(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = error_response(413, ErrorCode.INVALID_REQUEST,
                                 f"the request body is over {self.max_bytes} bytes",
                                 {"connection": "close"})
        await refusal(scope, receive, send)


async def read_body(receive: Receive) -> bytes:
    """A request's whole body (the body limit, in front, has already bounded it)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app a body already read whole, then the server's own
    messages (http.disconnect), as if nothing had read it."""
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped
