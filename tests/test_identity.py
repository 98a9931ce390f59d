"""The JWT module refuses every token of the attack list and accepts good ones."""

from __future__ import annotations

import json
import time

import pytest

from agentchat.errors import TokenError
from agentchat.identity import DEMO_USERS, DevUserIssuer, service_verifier, user_verifier
from agentchat.keys import KeyRing, load_ring, new_key, save_ring, sign_service_token
from agentchat.settings import SharedSettings
from attacks import SERVICE_ATTACKS, USER_ATTACKS, service_attacks, user_attacks


def test_good_tokens_verify_with_roles(settings: SharedSettings, issuer: DevUserIssuer,
                                       ring: KeyRing) -> None:
    bob = user_verifier(settings).verify(issuer.mint("bob"))
    assert bob.sub == "bob"
    assert bob.roles == (("editor", "ss-dev"), ("editor", "ss-stage"), ("viewer", "prod"))
    assert bob.role_strings() == DEMO_USERS["bob"]
    svc = service_verifier(settings).verify(sign_service_token(
        ring, issuer=settings.service_issuer, audience=settings.service_audience))
    assert svc.sub == "agentchat-agent"


@pytest.mark.parametrize("name", USER_ATTACKS)
def test_user_attacks_refused(settings: SharedSettings, issuer: DevUserIssuer, ring: KeyRing,
                              name: str) -> None:
    token = user_attacks(settings, issuer, ring)[name]
    with pytest.raises(TokenError) as e:
        user_verifier(settings).verify(token)
    assert e.value.code == "UNAUTHORIZED"


@pytest.mark.parametrize("name", SERVICE_ATTACKS)
def test_service_attacks_refused(settings: SharedSettings, issuer: DevUserIssuer, ring: KeyRing,
                                 name: str) -> None:
    token = service_attacks(settings, issuer, ring)[name]
    with pytest.raises(TokenError):
        service_verifier(settings).verify(token)


def test_oversized_refused_before_parsing(settings: SharedSettings) -> None:
    with pytest.raises(TokenError) as e:
        user_verifier(settings).verify("a" * 9000)
    assert e.value.cause == "too_large"


def test_jwks_rotation_three_stages(settings: SharedSettings, ring: KeyRing) -> None:
    """A token of the previous key verifies while it is in the JWKS; a new current key signs."""
    verifier = service_verifier(settings)
    old_token = sign_service_token(ring, issuer=settings.service_issuer,
                                   audience=settings.service_audience)
    old = ring.current()
    nxt = new_key("next")
    save_ring(settings.keys_dir, KeyRing((old, nxt)), settings.jwks_path)
    # next first, then current; stages are not published (only public JWK members are)
    assert [k["kid"] for k in json.loads(settings.jwks_path.read_text())["keys"]] == [
        nxt.kid, old.kid]
    # Promote: next -> current, current -> previous.
    from dataclasses import replace
    now = time.time()
    rotated = KeyRing((replace(old, stage="previous", stage_since=now),
                       replace(nxt, stage="current", stage_since=now)))
    save_ring(settings.keys_dir, rotated, settings.jwks_path)
    assert verifier.verify(old_token).sub == "agentchat-agent"
    new_token = sign_service_token(load_ring(settings.keys_dir), issuer=settings.service_issuer,
                                   audience=settings.service_audience)
    assert verifier.verify(new_token)
    # Previous leaves: its tokens stop verifying.
    save_ring(settings.keys_dir, KeyRing((replace(nxt, stage="current"),)), settings.jwks_path)
    with pytest.raises(TokenError) as e:
        verifier.verify(old_token)
    assert e.value.cause == "unknown_kid"
    assert verifier.verify(new_token)


def test_dev_issuer_refused_outside_dev(data_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCHAT_DATA_DIR", str(data_dir))
    monkeypatch.setenv("AGENTCHAT_MODE", "production")
    with pytest.raises(RuntimeError):
        DevUserIssuer(SharedSettings())
