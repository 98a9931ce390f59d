"""Our credential for another team's MCP server (agent/gate/upstream_auth.py): read from the
mounted Secret's files, re-read when they rotate, never the user's token; a signed JWT names
the caller; client credentials are exchanged once and kept; `none` only in dev."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agentchat.agent.gate.upstream_auth import (
    NOT_CONFIGURED,
    UNAVAILABLE,
    UpstreamAuthError,
    UpstreamCredentials,
)
from agentchat.catalog_upstreams import UpstreamAuth

JWT_AUTH = UpstreamAuth(type="jwt", audience="superset-mcp", issuer="agentchat",
                        user_claim="agentchat_user", lifetime_s=120)
CC_AUTH = UpstreamAuth(type="client_credentials", token_url="https://idp.example/token",
                       client_id="agentchat", scope="mcp.read")


def rsa_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public.decode()


def put(folder: Path, server: str, name: str, text: str) -> None:
    path = folder / server / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)  # as a Secret's update swaps the file


def bearer_of(headers: dict[str, str]) -> str:
    scheme, _, token = headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    return token


async def test_a_static_bearer_is_read_and_reread_when_it_rotates(tmp_path: Path) -> None:
    async with httpx.AsyncClient() as http:
        creds = UpstreamCredentials(folder=tmp_path, http=http, dev=False)
        put(tmp_path, "superset", "token", "first-token\n")
        auth = UpstreamAuth(type="bearer")
        assert bearer_of(await creds.headers("superset", auth, user="alice")) == "first-token"
        put(tmp_path, "superset", "token", "second-token-rotated")
        assert bearer_of(await creds.headers("superset", auth, user="alice")) == \
            "second-token-rotated"


async def test_a_signed_jwt_names_the_caller_and_follows_a_rotated_key(tmp_path: Path) -> None:
    private, public = rsa_pair()
    put(tmp_path, "superset", "private_key.pem", private)
    async with httpx.AsyncClient() as http:
        creds = UpstreamCredentials(folder=tmp_path, http=http, dev=False)
        first = bearer_of(await creds.headers("superset", JWT_AUTH, user="alice"))
        second = bearer_of(await creds.headers("superset", JWT_AUTH, user="alice"))
        agent_own = bearer_of(await creds.headers("superset", JWT_AUTH, user=None))
        claims = jwt.decode(first, public, algorithms=["RS256"], audience="superset-mcp",
                            issuer="agentchat")
        assert claims["sub"] == "agentchat" and claims["agentchat_user"] == "alice"
        assert claims["exp"] - claims["iat"] == 120
        assert claims["jti"] != jwt.decode(second, options={"verify_signature": False})["jti"]
        assert "agentchat_user" not in jwt.decode(agent_own, options={"verify_signature": False})
        private2, public2 = rsa_pair()
        put(tmp_path, "superset", "private_key.pem", private2)
        rotated = bearer_of(await creds.headers("superset", JWT_AUTH, user="bob"))
        assert jwt.decode(rotated, public2, algorithms=["RS256"], audience="superset-mcp",
                          issuer="agentchat")["agentchat_user"] == "bob"
        put(tmp_path, "superset", "private_key.pem", "not a key")
        with pytest.raises(UpstreamAuthError) as e:
            await creds.headers("superset", JWT_AUTH, user="bob")
        assert e.value.reason == NOT_CONFIGURED


class TokenEndpoint:
    def __init__(self, status: int = 200, expires_in: float = 3600) -> None:
        self.asked: list[httpx.Request] = []
        self.status = status
        self.expires_in = expires_in

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(request)
        if self.status != 200:
            return httpx.Response(self.status, json={"error": "invalid_client"})
        return httpx.Response(200, json={"access_token": f"at-{len(self.asked)}",
                                         "token_type": "Bearer",
                                         "expires_in": self.expires_in})


async def test_client_credentials_are_exchanged_once_and_kept(tmp_path: Path) -> None:
    endpoint = TokenEndpoint()
    put(tmp_path, "superset", "client_secret", "s3cret")
    async with httpx.AsyncClient(transport=httpx.MockTransport(endpoint)) as http:
        creds = UpstreamCredentials(folder=tmp_path, http=http, dev=False)
        got = await asyncio.gather(*(creds.headers("superset", CC_AUTH, user="alice")
                                     for _ in range(5)))
        assert {bearer_of(h) for h in got} == {"at-1"} and len(endpoint.asked) == 1
        asked = endpoint.asked[0]
        form = dict(x.split("=") for x in asked.content.decode().split("&"))
        assert form == {"grant_type": "client_credentials", "scope": "mcp.read"}
        assert asked.headers["Authorization"] == "Basic " + base64.b64encode(
            b"agentchat:s3cret").decode()
        put(tmp_path, "superset", "client_secret", "rotated-secret")  # asks again
        assert bearer_of(await creds.headers("superset", CC_AUTH, user="alice")) == "at-2"
        creds.invalidate("superset")  # the upstream said 401
        assert bearer_of(await creds.headers("superset", CC_AUTH, user="alice")) == "at-3"


async def test_a_token_near_its_expiry_is_asked_for_again(tmp_path: Path) -> None:
    endpoint = TokenEndpoint(expires_in=1)
    put(tmp_path, "superset", "client_secret", "s3cret")
    async with httpx.AsyncClient(transport=httpx.MockTransport(endpoint)) as http:
        creds = UpstreamCredentials(folder=tmp_path, http=http, dev=False)
        await creds.headers("superset", CC_AUTH, user=None)
        await asyncio.sleep(1.0)
        assert bearer_of(await creds.headers("superset", CC_AUTH, user=None)) == "at-2"


@pytest.mark.parametrize(("status", "reason"), [(401, NOT_CONFIGURED), (503, UNAVAILABLE)])
async def test_a_token_endpoint_refusing_or_failing_is_a_reason(tmp_path: Path, status: int,
                                                                reason: str) -> None:
    put(tmp_path, "superset", "client_secret", "s3cret")
    async with httpx.AsyncClient(transport=httpx.MockTransport(TokenEndpoint(status))) as http:
        creds = UpstreamCredentials(folder=tmp_path, http=http, dev=False)
        with pytest.raises(UpstreamAuthError) as e:
            await creds.headers("superset", CC_AUTH, user=None)
    assert e.value.reason == reason and "s3cret" not in str(e.value)


async def test_no_secret_or_auth_none_outside_dev_is_not_configured(tmp_path: Path) -> None:
    none = UpstreamAuth(type="none")
    async with httpx.AsyncClient() as http:
        prod = UpstreamCredentials(folder=tmp_path, http=http, dev=False)
        dev = UpstreamCredentials(folder=tmp_path, http=http, dev=True)
        assert await dev.headers("superset", none, user="alice") == {}
        failures: list[Any] = []
        for creds, auth in ((prod, none), (prod, UpstreamAuth(type="bearer")),
                            (dev, JWT_AUTH)):
            with pytest.raises(UpstreamAuthError) as e:
                await creds.headers("superset", auth, user="alice")
            failures.append(e.value.reason)
    assert failures == [NOT_CONFIGURED] * 3
