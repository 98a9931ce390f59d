"""The JWT module refuses every token of the attack list and accepts good ones."""

from __future__ import annotations

import json
import logging
import time

import pytest

from agentchat.errors import TokenError
from agentchat.identity import (
    DEMO_USERS,
    DevUserIssuer,
    JwksFile,
    parse_roles,
    service_verifier,
    user_verifier,
)
from agentchat.keys import KeyRing, load_ring, new_key, save_ring, sign_service_token
from agentchat.settings import SharedSettings
from testkit.attacks import SERVICE_ATTACKS, USER_ATTACKS, service_attacks, user_attacks
from testkit.support import eventually


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
    """A token of the previous key verifies while it is in the JWKS; a new current key signs.
    (The file is read on every token here; `test_jwks_checked_every_check_s` covers the
    interval the components use.)"""
    verifier = service_verifier(settings, JwksFile(settings.jwks_path))
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


def test_jwks_checked_every_check_s(settings: SharedSettings, ring: KeyRing) -> None:
    """A key removed from the file is refused once the interval has passed, not before."""
    token = sign_service_token(ring, issuer=settings.service_issuer,
                               audience=settings.service_audience)
    slow = service_verifier(settings, JwksFile(settings.jwks_path, check_s=3600))
    quick = service_verifier(settings, JwksFile(settings.jwks_path, check_s=0.2))
    assert slow.verify(token).sub == quick.verify(token).sub == "agentchat-agent"
    save_ring(settings.keys_dir, KeyRing((new_key("current"),)), settings.jwks_path)
    assert slow.verify(token).sub == "agentchat-agent"  # its last look was under an hour ago

    def cause() -> str:
        try:
            quick.verify(token)
        except TokenError as e:
            return e.cause
        return "verified"

    assert eventually(cause, "unknown_kid") == "unknown_kid"


def test_dev_issuer_refused_outside_dev(data_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCHAT_DATA_DIR", str(data_dir))
    monkeypatch.setenv("AGENTCHAT_MODE", "production")
    with pytest.raises(RuntimeError):
        DevUserIssuer(SharedSettings())


@pytest.mark.parametrize(("entry", "why"), [
    ("admin@", "not a plain environment name"),
    ("admin@*", "not a plain environment name"),
    ("admin@qa", "an environment the catalog does not know"),
    ("admin@prod|ss-dev", "not a plain environment name"),
    ("admin@prod@ss-dev", "not a plain environment name"),
    ("adm*n", "not a plain role name"),
    ("*", "not a plain role name"),
    ("@prod", "not a plain role name"),
    ("admin prod", "not a plain role name"),
])
def test_roles_a_token_cannot_carry_are_ignored_and_logged(
        entry: str, why: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentchat.identity")
    roles = parse_roles([entry, "editor@ss-dev", "viewer"], ("ss-dev", "ss-stage", "prod"),
                        sub="mallory")
    assert roles == (("editor", "ss-dev"), ("viewer", None))  # never widened, the rest kept
    [record] = caplog.records
    assert record.name == "agentchat.identity"
    assert record.getMessage() == f"roles claim entry ignored ({why}): {entry!r}, sub 'mallory'"


def test_the_verifier_reads_roles_against_the_catalog(settings: SharedSettings,
                                                      issuer: DevUserIssuer,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentchat.identity")
    token = issuer.mint("mallory", ["admin@", "admin@qa", "adm*n", "editor@ss-dev", "oncall"])
    user = user_verifier(settings).verify(token)
    assert user.roles == (("editor", "ss-dev"), ("oncall", None))
    assert user.role_strings() == ["editor@ss-dev", "oncall"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged.count("roles claim entry ignored") == 3 and "sub 'mallory'" in logged
    for part in (token, *token.split(".")):
        assert part not in logged
    # An environment list given to the verifier (or a callable, as the sidecar's live catalog).
    assert user_verifier(settings, environments=["qa"]).verify(token).roles == (
        ("admin", "qa"), ("oncall", None))
    assert user_verifier(settings, environments=lambda: {"ss-dev"}).verify(token).roles == (
        ("editor", "ss-dev"), ("oncall", None))
    quiet_before = len(caplog.records)
    assert parse_roles(["admin@"], ("prod",), quiet=True) == ()
    assert len(caplog.records) == quiet_before
    with pytest.raises(TokenError) as e:
        parse_roles([["admin"]], ("prod",))
    assert e.value.cause == "bad_roles"
