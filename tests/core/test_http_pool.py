"""The agent's outbound httpx clients run on httpcore2's pool (agentchat/http_pool.py) and must
behave as httpx's own for their callers: the exceptions the tool runtime catches
(`httpx.ConnectError`, `httpx.ReadTimeout`), kept connections, and a connection the server
closed while it sat idle replaced without the caller seeing an error.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from agentchat.http_clients import async_client
from agentchat.http_pool import PooledTransport


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the handler says otherwise
    closes = False  # close each connection after its answer, without saying so
    seen: ClassVar[list[tuple[int, str]]] = []

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(0.5)
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # /slow: the client gave up
            return
        type(self).seen.append((self.client_address[1], self.path))
        if self.closes:
            self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Answer]]]:
    handler = type("Handler", (Answer,), {"seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


async def test_answers_on_kept_connections(server: tuple[str, type[Answer]]) -> None:
    url, handler = server
    async with async_client() as client:
        assert isinstance(client._transport, PooledTransport)
        got = [(await client.get(f"{url}/a{n}")).json()["path"] for n in range(3)]
    assert got == ["/a0", "/a1", "/a2"]
    assert len({port for port, _ in handler.seen}) == 1  # one connection, kept


async def test_a_connection_closed_while_idle_is_replaced(
    server: tuple[str, type[Answer]],
) -> None:
    url, handler = server
    handler.closes = True
    async with async_client() as client:
        for n in range(3):
            assert (await client.get(f"{url}/b{n}")).status_code == 200
            await asyncio.sleep(0.05)
    assert [path for _, path in handler.seen] == ["/b0", "/b1", "/b2"]


async def test_httpx_exceptions_as_before(server: tuple[str, type[Answer]]) -> None:
    url, _ = server
    async with async_client() as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"{url}/slow", timeout=0.2)
        with pytest.raises(httpx.ConnectError):
            await client.get("http://127.0.0.1:9/", timeout=2)  # discard: nobody listens
