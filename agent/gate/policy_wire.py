"""HTTP/1.1 to the policy sidecar, and nothing else: JSON POSTs over a few kept-alive
connections on loopback (`AGENTCHAT_AGENT_POLICY_URL`, docs/protocol.md §6).

Why not the shared httpx client: a check through httpx cost the agent ~1.5 ms of CPU (request
and response models, cookie handling, h11, two writes), through this ~0.15 ms (one write, one
read of the head, one of the body), and every MCP or chat call makes one
(bench/mcp_gateway.py). The sidecar is ours, in the same pod, and answers JSON with a
`Content-Length`; this client speaks that much HTTP, with no cookies, redirects or proxies,
and anything else it meets is an error (the caller fails closed).

A request on a kept connection that the server had closed (its keep-alive ran out) fails
before any answer; it is sent once more on a new connection. A check has no effect besides
its decision log line, and the server read nothing of the first copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

from agentchat.errors import ErrorCode, LocalError

# Uvicorn closes an idle connection after 5 s: one idle this long is not used again.
IDLE_S = 4.0
MAX_HEAD = 64 * 1024
MAX_BODY = 4 * 1024 * 1024


class WireError(LocalError):
    """No usable answer: the connection failed, timed out or the answer is not HTTP/1.1 as
    the sidecar writes it (the caller fails closed)."""

    CODE = ErrorCode.POLICY_UNAVAILABLE


class StaleConnection(WireError):
    """A kept connection was closed before any byte of the answer: safe to send again."""


class _Conn:
    __slots__ = ("idle_since", "loop", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self.loop = asyncio.get_running_loop()

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < IDLE_S
            and not self.reader.at_eof()
            and not self.writer.is_closing()
            and self.loop is asyncio.get_running_loop()
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class PolicyWire:
    """POSTs to one sidecar; at most `max_connections` at once (more wait for one)."""

    def __init__(self, url: str, *, max_connections: int = 200) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the policy URL must be http://host:port: {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.base_path = parts.path.rstrip("/")
        self.authority = parts.netloc
        self._idle: deque[_Conn] = deque()
        self._slots = asyncio.Semaphore(max_connections)

    def url(self, path: str) -> str:
        """Where a request to `path` goes, for spans and logs."""
        return f"http://{self.authority}{self.base_path}{path}"

    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> tuple[int, bytes]:
        """(status, body) of one POST of JSON `body`; WireError on anything else."""
        head = self._head(path, len(body), headers)
        try:
            async with asyncio.timeout(timeout_s), self._slots:
                conn = self._kept()
                if conn is not None:
                    try:
                        return await self._exchange(conn, head, body)
                    except StaleConnection:
                        pass
                return await self._exchange(await self._open(), head, body)
        except TimeoutError:
            raise WireError("no answer in time") from None

    def _head(self, path: str, length: int, headers: Mapping[str, str]) -> bytes:
        lines = [
            f"POST {self.base_path}{path} HTTP/1.1",
            f"Host: {self.authority}",
            "Content-Type: application/json",
            f"Content-Length: {length}",
        ]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise WireError(f"a header {name!r} holds a line break")
            lines.append(f"{name}: {value}")
        try:
            return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError:
            raise WireError("a header is not latin-1") from None

    def _kept(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()  # the most recently used: the likeliest still open
            if conn.usable(now):
                return conn
            conn.close()
        return None

    async def _open(self) -> _Conn:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        except OSError as e:
            raise WireError(f"cannot connect: {e}") from None
        return _Conn(reader, writer)

    async def _exchange(self, conn: _Conn, head: bytes, body: bytes) -> tuple[int, bytes]:
        fresh = conn.idle_since == 0.0
        keep = False
        try:
            try:
                conn.writer.write(head + body)
                await conn.writer.drain()
                answer_head = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                if not fresh and not getattr(e, "partial", b""):
                    raise StaleConnection("the kept connection was closed") from None
                raise WireError(f"connection failed: {type(e).__name__}") from None
            status, length, keep = _parse_head(answer_head)
            return status, await conn.reader.readexactly(length)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ValueError,
        ) as e:
            keep = False
            raise WireError(f"unreadable answer: {type(e).__name__}") from None
        except BaseException:
            keep = False  # cancelled or timed out mid-answer: the connection is unusable
            raise
        finally:
            if keep:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()


def _parse_head(raw: bytes) -> tuple[int, int, bool]:
    """(status, body length, whether the connection may be kept) of an answer's head; a
    ValueError for anything the sidecar does not write (no Content-Length, chunks, 1xx)."""
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or not rest[:3].isdigit():
        raise ValueError("not an HTTP/1.x answer")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError("a header line without a colon")
            fields[name.strip().lower()] = value.strip()
    length = fields.get("content-length", "")
    if "transfer-encoding" in fields or not length.isdigit() or int(length) > MAX_BODY:
        raise ValueError("no usable Content-Length")
    keep = version == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
    return int(rest[:3]), int(length), keep
