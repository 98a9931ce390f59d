"""The agent's own HTTP/1.1 to the policy sidecar (agent/gate/policy_wire.py), against a small
server that answers what a test scripts: kept connections are reused; one the server closed
while it was idle is replaced without the caller noticing; anything the sidecar would never
answer (no Content-Length, chunks, a cut body, silence) is an error the policy client turns
into POLICY_UNAVAILABLE, so nothing runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.agent.gate.policy_wire import PolicyWire, WireError
from agentchat.errors import AgentChatError, ErrorCode

DECISION = {"decision": "allow", "decision_id": "d1", "reason_code": "allowed"}


def answer(status: int, body: Any, *, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n{extra}\r\n"
    ).encode() + data


class Script:
    """What the server answers to its n-th request (None: close without a word), and what
    it received."""

    def __init__(
        self,
        reply: Callable[[int, dict[str, str], bytes], bytes | None],
        close_after_each: bool = False,
    ) -> None:
        self.reply = reply
        self.close_after_each = close_after_each
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append((headers, body))
                out = self.reply(len(self.requests), headers, body)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def served(script: Script) -> AsyncIterator[str]:
    server = await asyncio.start_server(script.serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_kept_connection_carries_the_tokens_and_the_body() -> None:
    script = Script(lambda n, h, b: answer(200, {**DECISION, "n": n}))
    async with served(script) as url:
        wire = PolicyWire(url)
        for n in (1, 2, 3):
            status, body = await wire.post(
                "/v1/check",
                b'{"tool":"x"}',
                {"Authorization": "Bearer svc", "X-User-JWT": "usr"},
                2.0,
            )
            assert (status, json.loads(body)["n"]) == (200, n)
        await wire.aclose()
    assert script.connections == 1
    headers, body = script.requests[0]
    assert (headers["authorization"], headers["x-user-jwt"], body) == (
        "Bearer svc",
        "usr",
        b'{"tool":"x"}',
    )
    assert headers["content-type"] == "application/json"


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    # Uvicorn closes a connection idle past its keep-alive: the next check must still pass.
    script = Script(lambda n, h, b: answer(200, DECISION), close_after_each=True)
    async with served(script) as url:
        wire = PolicyWire(url)
        for _ in range(3):
            assert (await wire.post("/v1/check", b"{}", {}, 2.0))[0] == 200
            await asyncio.sleep(0.05)  # the server's close reaches us
        await wire.aclose()
    assert len(script.requests) == 3 and script.connections == 3


@pytest.mark.parametrize(
    "bad",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{}",
        b'HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{"decision": "allow"}',
        b"SSH-2.0-OpenSSH\r\n\r\n",
        None,
    ],
    ids=["chunked", "no-length", "cut-body", "not-http", "silence"],
)
async def test_what_the_sidecar_never_answers_runs_nothing(bad: bytes | None) -> None:
    script = Script(lambda n, h, b: bad)
    async with served(script) as url:
        wire = PolicyWire(url)
        with pytest.raises(WireError):
            await wire.post("/v1/check", b"{}", {}, 2.0)
        client = PolicyClient(url=url, timeout_s=2.0, tokens=_Tokens())
        with pytest.raises(AgentChatError) as refused:
            await client.check(
                user_jwt="usr", tool="get_dashboard", arguments={}, environment="ss-dev"
            )
        assert refused.value.code is ErrorCode.POLICY_UNAVAILABLE
        await wire.aclose()
        await client.aclose()


async def test_no_answer_in_time_is_an_error_within_the_budget() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    async with server:
        wire = PolicyWire(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        started = asyncio.get_running_loop().time()
        with pytest.raises(WireError):
            await wire.post("/v1/check", b"{}", {}, 0.2)
        assert asyncio.get_running_loop().time() - started < 2.0
        await wire.aclose()


async def test_a_header_with_a_line_break_is_never_sent() -> None:
    script = Script(lambda n, h, b: answer(200, DECISION))
    async with served(script) as url:
        wire = PolicyWire(url)
        with pytest.raises(WireError):
            await wire.post("/v1/check", b"{}", {"X-User-JWT": "a\r\nX-Admin: 1"}, 2.0)
        await wire.aclose()
    assert script.requests == []


async def test_a_refused_service_token_is_read_again_once() -> None:
    # A rotation: the first 401 makes the client re-read its token and ask once more.
    script = Script(
        lambda n, h, b: answer(401, {"code": "UNAUTHORIZED"}) if n == 1 else answer(200, DECISION)
    )
    tokens = _Tokens()
    async with served(script) as url:
        client = PolicyClient(url=url, timeout_s=2.0, tokens=tokens)
        decision = await client.check(
            user_jwt="usr", tool="get_dashboard", arguments={}, environment="ss-dev"
        )
        await client.aclose()
    assert decision["decision"] == "allow" and tokens.invalidated == 1
    assert [h["authorization"] for h, _ in script.requests] == ["Bearer svc-1", "Bearer svc-2"]


class _Tokens:
    """The service token provider's interface: a new token after each invalidate()."""

    def __init__(self) -> None:
        self.invalidated = 0

    async def get(self) -> str:
        return f"svc-{self.invalidated + 1}"

    def invalidate(self) -> None:
        self.invalidated += 1
