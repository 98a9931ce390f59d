"""The agent keeps a verified user token (agentchat/verified_tokens.py) so the requests of one
submit do not each pay an RSA verification; a key that leaves the JWKS file must still stop
its tokens at once, cached or not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from testkit.stack import Stack
from testkit.support import eventually

CONVERSATIONS = "/api/assistant/conversations"


def _swap(path: Path, text: str) -> None:
    """As a Secret or ConfigMap update does: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_cached_token_stops_once_its_key_leaves_the_jwks(stack: Stack,
                                                           tmp_path: Path) -> None:
    jwks = tmp_path / "user-jwks.json"
    original = stack.settings().user_jwks.read_text()
    jwks.write_text(original)
    agent = stack.start_agent(AGENTCHAT_USER_JWKS_PATH=str(jwks))
    headers = {"Authorization": f"Bearer {stack.token('carol')}"}

    def status() -> int:
        return httpx.get(agent.url + CONVERSATIONS, headers=headers, timeout=10).status_code

    assert [status() for _ in range(3)] == [200, 200, 200]  # verified once, then kept
    other = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()))
    other.update(kid="rotated-in", use="sig", alg="RS256")
    _swap(jwks, json.dumps({"keys": [other]}))
    # The file is looked at every AGENTCHAT_JWKS_CHECK_S (1 s): refused within that, and then
    # on every request, cached or not.
    assert eventually(status, 401) == 401
    refused = httpx.get(agent.url + CONVERSATIONS, headers=headers, timeout=10)
    assert (refused.status_code, refused.json()["code"]) == (401, "UNAUTHORIZED")
    _swap(jwks, original)  # the key is back: the same token is good again
    assert eventually(status, 200) == 200
