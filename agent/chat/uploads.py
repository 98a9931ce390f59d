"""Files on `/chat` come only from Gradio's upload folder, and only from their uploader (the
guard covers the page's app under the mount, PAGE_SUBPATH, the same way).

    POST …/gradio_api/upload ─ GradioFileGuard: a valid user token, else 401; the quotas
                               (upload_quota.py: 413/429 before Gradio writes anything); the
                               paths Gradio answers are recorded in OWNERS under the token's `sub`
    POST …/queue/join, call… ─ GradioFileGuard: a FileData path outside the upload folder is
                               422 INVALID_REQUEST before Gradio copies or hashes anything
    /chat message.files      ─ inputs.parse_files (no I/O), then inputs.file_text: the owner,
                               then read_upload in a thread (O_NOFOLLOW, fstat, S_ISREG, a cap)

The owner map lives in the agent process. An upload and the submit naming it reach the same
replica (the Gradio session is sticky, and the file itself exists only in that pod's upload
folder), so a shared store would buy nothing; after a restart the map is empty and older
uploads are refused: the user attaches the file again. That is fail closed, and simpler than
sidecar files Gradio would also serve, or a table written on every upload.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Callable
from typing import Any

from gradio.utils import get_upload_folder
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentchat.agent.api.errors import error_response
from agentchat.agent.api.limits import read_body, replay
from agentchat.agent.chat.limits import PerMinute
from agentchat.agent.chat.upload_quota import UploadBook, UploadLimits, UploadRefused, take
from agentchat.agent.settings import PAGE_SUBPATH
from agentchat.errors import AgentChatError, ErrorCode, LocalError


class RefusedFile(LocalError):
    """A file named on `/chat` that is not a readable upload of this user; safe to show."""

    CODE = ErrorCode.INVALID_REQUEST


def upload_folder() -> str:
    """Gradio's upload folder as Gradio names it (GRADIO_TEMP_DIR, else <tmp>/gradio)."""
    return os.path.abspath(get_upload_folder())


def upload_key(path: Any) -> str | None:
    """The path relative to the upload folder, or None if it is not lexically inside it.

    No file system access: `..` anywhere, NUL bytes, URLs and relative paths are refused as
    written, before anyone opens, stats or hashes them."""
    if not isinstance(path, str) or not path or "\x00" in path or "://" in path:
        return None
    if ".." in path.replace("\\", "/").split("/") or not os.path.isabs(path):
        return None
    rel = os.path.relpath(os.path.normpath(path), upload_folder())
    if rel == "." or rel == ".." or rel.startswith(".." + os.sep):
        return None
    return rel


def no_links(path: str, key: str) -> bool:
    """No symlink anywhere below the upload folder (lstat/readlink only, nothing is read)."""
    return os.path.realpath(path) == os.path.join(os.path.realpath(upload_folder()), key)


# Who owns each upload, its size and last use, and the quotas (agent/chat/upload_quota.py).
OWNERS = UploadBook()


def delete_uploads(keys: list[str]) -> int:
    """Delete uploads no one holds any more (and Gradio's hash folder once empty); how many
    were deleted. A key is relative to the upload folder (upload_key), so nothing outside it."""
    root, deleted = upload_folder(), 0
    for key in keys:
        if OWNERS.known(key):  # uploaded again meanwhile (the same content, the same path)
            continue
        path = os.path.join(root, key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a link is removed, never followed
            deleted += 1
        parent = os.path.dirname(path)
        if parent != root:
            with contextlib.suppress(OSError):
                os.rmdir(parent)  # only if empty: another name of the same content stays
    return deleted


def sweep_uploads(expiry_s: float) -> int:
    """The sweeper's part (agent/chat/recovery.py; blocking, call it in a thread): uploads
    unused for `expiry_s`, deleted; and files no one here owns (left from before a restart,
    which the emptyDir outlives) once their mtime, the last use (read_upload), is as old."""
    deleted = delete_uploads(OWNERS.expired(expiry_s))
    root, cutoff = upload_folder(), time.time() - expiry_s
    for parent, _, names in os.walk(root):
        for name in names:
            path = os.path.join(parent, name)
            key = os.path.relpath(path, root)
            with contextlib.suppress(OSError):
                if not OWNERS.known(key) and os.lstat(path).st_mtime < cutoff:
                    deleted += delete_uploads([key])
    return deleted


def forget_conversation(conversation_id: str, sub: str) -> int:
    """A deleted conversation: the uploads its messages used, deleted unless another user
    holds the same file."""
    return delete_uploads(OWNERS.forget_conversation(conversation_id, sub))


def read_upload(path: str, key: str, limit: int) -> bytes:
    """An uploaded regular file's bytes, at most `limit` (blocking: call it in a thread).

    O_NOFOLLOW refuses a link as the last part and `no_links` one above it; O_NONBLOCK keeps a
    FIFO from blocking the open; the size is fstat's of the open file, never the client's, and
    at most limit + 1 bytes are read, so a file that grows is caught too."""
    if not no_links(path, key):
        raise RefusedFile("a file is a link")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise RefusedFile("a file was not uploaded or is gone") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile("a file is not a regular file")
        with contextlib.suppress(OSError):
            os.utime(fd)  # its last use, on disk: the sweeper's clock for a file it forgot
        if st.st_size > limit:
            raise RefusedFile(f"a file is over {limit // 1024} KB")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RefusedFile(f"a file is over {limit // 1024} KB")
    return data


# --- the guard in front of Gradio's routes ----------------------------------------------------


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
                 user_of: Callable[[Headers], str | None], limits: UploadLimits) -> None:
        self.app = app
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
                if key is not None and OWNERS.known(key) and not OWNERS.owns(key, sub):
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
        (agent/chat/upload_quota.py), and its room is held until Gradio answered."""
        try:
            self.rate.admit(sub)
        except AgentChatError as e:
            return await error_response(429, e.code, e.detail, {
                "retry-after": str(e.retry_after or 1)})(scope, receive, send)
        try:
            read = await take(OWNERS, sub, receive, Headers(scope=scope), self.limits)
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
            OWNERS.release(sub, len(sizes), sum(sizes))

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
                            OWNERS.record(key, sub, size)
            await send(message)

        return wrapped
