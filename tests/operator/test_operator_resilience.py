"""Specs and accidents that must not wedge key and token work (issue 23, items 1, 2 and 6),
with `agentchat operator` (kopf) against the API emulator. The emulator admits any spec, as
an API server with an older CRD (no CEL rules) would."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import jwt.api_jwt
import pytest
from test_operator_kopf import (
    NS,
    cluster,
    conditions,
    operator_factory,
    verifier_for,
    wait_for,
)

from agentchat.keys import KeyRing
from testkit.kube_emulator import KubeEmulator

__all__ = ["cluster", "operator_factory"]  # fixtures re-used from the kopf tests


def _token(cluster: KubeEmulator) -> str | None:
    return (cluster.secret(NS, "chat-service-token") or {}).get("token")


def _claims(token: str) -> dict[str, Any]:
    return dict(jwt.decode(token, options={"verify_signature": False}))


def _ready(cluster: KubeEmulator) -> bool:
    return conditions(cluster, "chat").get("Ready", {}).get("status") == "True"


def test_an_invalid_spec_keeps_the_token_renewed_from_the_last_good_one(
        cluster: KubeEmulator, operator_factory: Any, tmp_path: Path) -> None:
    cluster.create_agentchat(NS, "chat", {
        "serviceToken": {"lifetimeSeconds": 10, "refreshMarginSeconds": 7},
        "signingKeys": {"rotationIntervalSeconds": 3600, "prePublicationSeconds": 2}})
    operator_factory()
    wait_for("Ready", lambda: _ready(cluster))
    first = _token(cluster)
    assert first
    # Margin above lifetime: refused by the operator's model (the CRD's CEL rule would
    # refuse it too, but an older CRD without the rule admits it).
    cluster.patch_agentchat_spec(NS, "chat", {"serviceToken": {"refreshMarginSeconds": 50}})
    cond = wait_for("SpecValid False", lambda: (
        c if (c := conditions(cluster, "chat").get("SpecValid", {})).get("status") == "False"
        else None))
    assert cond["reason"] == "InvalidSpec" and "refreshMarginSeconds" in cond["message"]
    assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning"
               for e in cluster.events(NS))
    # The token keeps being renewed by the last good spec (lifetime 10 s, margin 7 s).
    renewed = wait_for("a renewal under the invalid spec", lambda: (
        t if (t := _token(cluster)) and t != first else None), timeout=20)
    assert _claims(renewed)["exp"] - _claims(renewed)["iat"] == 10
    jwks = cluster.secret(NS, "chat-jwks")["jwks.json"]
    assert verifier_for(jwks, tmp_path).verify(renewed).sub == "agentchat-agent"
    assert _ready(cluster)
    status = cluster.agentchat(NS, "chat")["status"]
    assert status["lastGoodSpec"]["serviceToken"]["refreshMarginSeconds"] == 7
    # Fixed: the condition clears and the new spec is in effect.
    cluster.patch_agentchat_spec(NS, "chat", {"serviceToken": {"refreshMarginSeconds": 4}})
    wait_for("SpecValid True", lambda: conditions(cluster, "chat").get(
        "SpecValid", {}).get("status") == "True")


def test_a_spec_newer_than_the_operator_is_acted_on(cluster: KubeEmulator,
                                                    operator_factory: Any) -> None:
    """A field of a newer CRD (a rollback leaves the newer CRD installed) is ignored."""
    cluster.create_agentchat(NS, "chat", {
        "serviceToken": {"lifetimeSeconds": 120, "refreshMarginSeconds": 30,
                         "audiences": ["ss-tools", "other"]},
        "signingKeys": {"prePublicationSeconds": 2, "algorithmPreferences": ["EdDSA"]},
        "observability": {"alerts": True}})
    operator_factory()
    wait_for("Ready", lambda: _ready(cluster))
    assert conditions(cluster, "chat")["SpecValid"]["status"] == "True"
    token = _token(cluster)
    assert token and _claims(token)["exp"] - _claims(token)["iat"] == 120


def test_a_missing_ring_is_recovered_without_an_instant_swap(
        cluster: KubeEmulator, operator_factory: Any, tmp_path: Path) -> None:
    pre = 4
    cluster.create_agentchat(NS, "chat", {
        "serviceToken": {"lifetimeSeconds": 300, "refreshMarginSeconds": 60},
        "signingKeys": {"rotationIntervalSeconds": 3600, "prePublicationSeconds": pre}})
    operator_factory()
    wait_for("Ready", lambda: _ready(cluster))
    token = _token(cluster)
    assert token
    old_kid = jwt.get_unverified_header(token)["kid"]

    cluster.delete(f"/api/v1/namespaces/{NS}/secrets/chat-signing-keys")
    ring_text = wait_for("the ring recreated", lambda: (
        cluster.secret(NS, "chat-signing-keys") or {}).get("signing-keys.json"))
    ring = KeyRing.from_json(ring_text)
    assert [k.stage for k in ring.keys] == ["next"], "never an instant swap"
    new_kid = ring.keys[0].kid
    jwks = json.loads(cluster.secret(NS, "chat-jwks")["jwks.json"])
    assert {old_kid, new_kid} <= {k["kid"] for k in jwks["keys"]}
    # The token in flight is untouched and still verifies against the published JWKS.
    assert _token(cluster) == token
    assert verifier_for(json.dumps(jwks), tmp_path).verify(token).sub == "agentchat-agent"
    events = [e for e in cluster.events(NS) if e["reason"] == "RingRecreated"]
    assert events and events[0]["type"] == "Warning"

    # After the pre-publication the next key signs; the old key stays for the overlap.
    renewed = wait_for("the token signed by the new key", lambda: (
        t if (t := _token(cluster)) and jwt.get_unverified_header(t)["kid"] == new_kid
        else None), timeout=30)
    kids = {k["kid"] for k in json.loads(cluster.secret(NS, "chat-jwks")["jwks.json"])["keys"]}
    assert {old_kid, new_kid} <= kids
    verifier = verifier_for(cluster.secret(NS, "chat-jwks")["jwks.json"], tmp_path / "after")
    assert verifier.verify(renewed).sub == verifier.verify(token).sub == "agentchat-agent"


class _Later(dt.datetime):
    shift = 0.0

    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> _Later:
        real = dt.datetime.now(tz)
        moved = real + dt.timedelta(seconds=cls.shift)
        return cls.fromtimestamp(moved.timestamp(), tz)


def test_the_default_token_outlives_an_operator_outage_of_45_minutes(
        cluster: KubeEmulator, operator_factory: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Default spec: the operator stops right after it renewed the token. 20 minutes later
    (the old defaults' token had expired by then: 900 s) and 45 minutes later (the new
    renewal margin) the sidecar's verifier still accepts it; only past the hour it fails."""
    cluster.create_agentchat(NS, "chat", {})
    op = operator_factory()
    wait_for("Ready", lambda: _ready(cluster))
    op.stop()
    token = _token(cluster)
    assert token
    claims = _claims(token)
    assert claims["exp"] - claims["iat"] == 3600
    status = cluster.agentchat(NS, "chat")["status"]["token"]
    refresh_at = dt.datetime.fromisoformat(status["refreshAt"].replace("Z", "+00:00"))
    assert claims["exp"] - refresh_at.timestamp() == 2700  # renewed with 45 minutes left
    verifier = verifier_for(cluster.secret(NS, "chat-jwks")["jwks.json"], tmp_path)
    monkeypatch.setattr(jwt.api_jwt, "datetime", _Later)
    for minutes in (20, 45):
        _Later.shift = minutes * 60.0
        assert verifier.verify(token).sub == "agentchat-agent", minutes
    _Later.shift = 3600.0 + 60
    with pytest.raises(Exception, match="expired"):
        verifier.verify(token)
