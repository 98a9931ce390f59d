"""One token, one audience (RFC 8707): a token minted for the MCP endpoint's resource never
serves /chat or REST, a /chat token never serves MCP, and one naming both serves neither."""

from __future__ import annotations

import pytest

from agentchat.errors import TokenError
from agentchat.identity import DevUserIssuer, user_verifier
from agentchat.settings import SharedSettings

MCP = "https://ss.example.com/api/agent/mcp"


def chat_verifier(settings: SharedSettings):  # type: ignore[no-untyped-def]
    return user_verifier(settings, refused_audience=MCP)


def mcp_verifier(settings: SharedSettings):  # type: ignore[no-untyped-def]
    return user_verifier(settings, audience=MCP, refused_audience=settings.user_audience)


def test_each_token_serves_its_own_audience(settings: SharedSettings,
                                            issuer: DevUserIssuer) -> None:
    chat = issuer.mint("alice")
    mcp = issuer.mint("alice", extra={"aud": MCP})
    assert chat_verifier(settings).verify(chat).sub == "alice"
    assert mcp_verifier(settings).verify(mcp).sub == "alice"
    with pytest.raises(TokenError) as e:
        chat_verifier(settings).verify(mcp)
    assert e.value.cause == "bad_audience"
    with pytest.raises(TokenError) as e:
        mcp_verifier(settings).verify(chat)
    assert e.value.cause == "bad_audience"


def test_a_token_for_both_serves_neither(settings: SharedSettings,
                                         issuer: DevUserIssuer) -> None:
    both = issuer.mint("alice", extra={"aud": [settings.user_audience, MCP]})
    for verifier in (chat_verifier(settings), mcp_verifier(settings)):
        with pytest.raises(TokenError) as e:
            verifier.verify(both)
        assert e.value.cause == "bad_audience"
    # Without a refused audience (the sidecar, the sandbox) it is a user token as before.
    assert user_verifier(settings).verify(both).sub == "alice"
