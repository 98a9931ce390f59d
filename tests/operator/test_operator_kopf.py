"""The operator for real: `agentchat operator` (kopf) as a process against kmock's Kubernetes
API emulator, with the real PostgreSQL for pruning.

Timings are short (a 0.3 s tick, keys rotating every few seconds); every wait has a generous
deadline and every assertion reads what a cluster would hold (Secrets, ConfigMap, status,
Events).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentchat.identity import JwksFile, service_verifier
from agentchat.keys import KeyRing, sign_service_token, write_atomic
from agentchat.settings import SharedSettings
from testkit.kube_emulator import KubeEmulator
from testkit.support import Service, free_port, stop_all

NS = "team-a"
LEEWAY = 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(tmp_path).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def operator_factory(cluster: KubeEmulator, tmp_path: Path) -> Iterator[Callable[[], Service]]:
    started: list[Service] = []

    def start() -> Service:
        port = free_port()
        svc = Service(
            ["operator", "--standalone", "--host", "127.0.0.1", "--port", str(port)],
            env={"KUBECONFIG": str(cluster.kubeconfig), "AGENTCHAT_OPERATOR_TUNING__TICK_S": "0.3",
                 "AGENTCHAT_OPERATOR_TUNING__CONSISTENCY_TIMEOUT_S": "0",
                 "AGENTCHAT_OPERATOR_TUNING__BACKOFF_BASE_S": "0.5",
                 "AGENTCHAT_JWT_LEEWAY_S": str(LEEWAY),
                 "AGENTCHAT_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "",
                 # dev: these tests rotate keys in seconds (prePublicationSeconds below 120)
                 "AGENTCHAT_MODE": "dev",
                 # Nothing is deleted while these stop: a short watch for it (3 s by default;
                 # chart_operator keeps it, for test_operator_day_two's uninstall).
                 "AGENTCHAT_OPERATOR_RELEASE_ON_STOP_S": "0.3"},
            port=port, ready_path="/healthz", log=tmp_path / f"operator-{len(started)}.log",
        ).start()
        started.append(svc)
        return svc

    yield start
    stop_all(started)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0,
             every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def conditions(cluster: KubeEmulator, name: str) -> dict[str, dict[str, Any]]:
    obj = cluster.agentchat(NS, name) or {}
    return {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}


def key_events(cluster: KubeEmulator) -> list[str]:
    return sorted(e["reason"] + ":" + e["message"] for e in cluster.events(NS)
                  if e["reason"].startswith(("Key", "Token")))


def verifier_for(jwks_text: str, folder: Path) -> Any:
    path = folder / "jwks" / "jwks.json"
    write_atomic(path, jwks_text, 0o644)
    settings = SharedSettings(jwt_leeway_s=LEEWAY, service_jwks_path=path)
    return service_verifier(settings, JwksFile(path))


def test_first_create_publishes_keys_and_token(cluster: KubeEmulator, operator_factory: Any,
                                              tmp_path: Path) -> None:
    cluster.create_agentchat(NS, "chat", {})
    operator_factory()
    ready = wait_for("Ready", lambda: conditions(cluster, "chat").get("Ready", {}).get(
        "status") == "True")
    assert ready
    ring = KeyRing.from_json(cluster.secret(NS, "chat-signing-keys")["signing-keys.json"])
    assert [k.stage for k in ring.keys] == ["current"]
    jwks = cluster.secret(NS, "chat-jwks")["jwks.json"]
    assert cluster.config_map(NS, "chat-jwks") == {"jwks.json": jwks}
    assert "private_pem" not in jwks and "\"d\"" not in jwks
    token = cluster.secret(NS, "chat-service-token")["token"]
    # Beside the token, the key that seals a live run's user token (agent/storage/sealing.py).
    assert len(cluster.secret(NS, "chat-service-token")["resume-key"]) >= 48
    principal = verifier_for(jwks, tmp_path).verify(token)
    assert principal.sub == "agentchat-agent"
    assert principal.claims["aud"] == "ss-tools"
    status = cluster.agentchat(NS, "chat")["status"]
    assert status["keys"]["current"] == ring.current().kid
    assert status["token"]["kid"] == ring.current().kid
    conds = conditions(cluster, "chat")
    assert conds["KeysRotated"]["status"] == conds["TokenFresh"]["status"] == "True"
    reasons = {e["reason"] for e in cluster.events(NS)}
    assert {"KeyCreated", "TokenRenewed"} <= reasons
    # Everything written is owned by the AgentChat (garbage-collected with it).
    secret = cluster.get(f"/api/v1/namespaces/{NS}/secrets/chat-signing-keys")
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "AgentChat"


def test_restart_rotates_nothing_that_is_not_due(cluster: KubeEmulator, operator_factory: Any
                                                 ) -> None:
    cluster.create_agentchat(NS, "chat", {"signingKeys": {"rotationIntervalSeconds": 3600}})
    op = operator_factory()
    wait_for("Ready", lambda: conditions(cluster, "chat").get("Ready", {}).get(
        "status") == "True")
    time.sleep(1.0)  # a few ticks: nothing is due
    names = ["chat-signing-keys", "chat-jwks", "chat-service-token"]
    writes = {n: cluster.writes(NS, n) for n in names}
    before = {n: cluster.secret(NS, n) for n in names}
    events = key_events(cluster)
    op.stop()
    operator_factory()
    time.sleep(3.0)  # kopf fires the timers at start, then ~10 more ticks
    assert {n: cluster.secret(NS, n) for n in names} == before
    assert {n: cluster.writes(NS, n) for n in names} == writes
    assert key_events(cluster) == events
    assert conditions(cluster, "chat")["Ready"]["status"] == "True"


def test_three_stage_rotation(cluster: KubeEmulator, operator_factory: Any,
                              tmp_path: Path) -> None:
    """Watch the stages live: next is published `pre` seconds before it signs, the token
    moves to each new key, a token signed by the previous key verifies until the overlap
    (lifetime + leeway) ends, and the JWKS always holds the key of the live token."""
    interval, pre, lifetime = 6, 3, 10
    cluster.create_agentchat(NS, "chat", {
        "serviceToken": {"lifetimeSeconds": lifetime, "refreshMarginSeconds": 4},
        "signingKeys": {"rotationIntervalSeconds": interval, "prePublicationSeconds": pre},
    })
    operator_factory()
    published: dict[str, float] = {}  # kid -> first seen in the JWKS
    signing: dict[str, float] = {}  # kid -> first seen signing the token
    retired: dict[str, float] = {}
    old_token: str | None = None
    old_kid: str | None = None
    resume_lists: list[tuple[float, list[str]]] = []  # (first seen, the lines) per change
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not retired:
        jwks_data = cluster.secret(NS, "chat-jwks")
        ring_data = cluster.secret(NS, "chat-signing-keys")
        token_data = cluster.secret(NS, "chat-service-token")
        now = time.monotonic()
        if not (jwks_data and ring_data and token_data):
            time.sleep(0.1)
            continue
        jwks = json.loads(jwks_data["jwks.json"])
        kids = {k["kid"] for k in jwks["keys"]}
        ring = KeyRing.from_json(ring_data["signing-keys.json"])
        token_kid = json.loads(_b64d(token_data["token"].split(".")[0]))["kid"]
        lines = token_data["resume-key"].splitlines()
        if not resume_lists or resume_lists[-1][1] != lines:
            resume_lists.append((now, lines))
        for kid in kids:
            published.setdefault(kid, now)
        signing.setdefault(token_kid, now)
        # Never half-rotated: the live token's key and every key that signs or did are
        # published (a next key reaches the ring a moment before the JWKS since the ring is
        # the one-writer lock, issue 37; it signs only `pre` seconds after publication, below).
        assert token_kid in kids
        assert {k.kid for k in ring.keys if k.stage != "next"} <= kids | set(published)
        previous = ring.by_stage("previous")
        if previous and old_token is None:
            # Sign, as the old key did just before it retired from signing.
            old_kid = previous[0].kid
            key_ring = KeyRing(keys=(previous[0].__class__(**{
                **previous[0].__dict__, "stage": "current"}),))
            old_token = sign_service_token(key_ring, issuer="agentchat", audience="ss-tools",
                                           lifetime_s=lifetime)
            verifier = verifier_for(jwks_data["jwks.json"], tmp_path)
            assert verifier.verify(old_token).sub == "agentchat-agent"
        if old_kid and old_kid not in kids:
            retired[old_kid] = now
        time.sleep(0.1)
    assert retired, "the previous key never left the JWKS"
    assert len(signing) >= 2
    first = min(published, key=published.get)  # type: ignore[arg-type]
    for kid, since in signing.items():
        if kid != first:
            # A next key never signs before it has been published for `pre` seconds.
            assert since - published[kid] >= pre - 0.5, (kid, since - published[kid])
    # The previous key stayed in the JWKS at least lifetime + leeway after it stopped signing.
    stopped = sorted(signing.values())[1]
    # Both instants are observed by polling, each late by up to a poll plus scheduling delay
    # on a loaded 2-core machine (seen: 0.4 s), hence the 1.5 s allowance.
    assert retired[old_kid] - stopped >= lifetime + LEEWAY - 1.5  # type: ignore[index]
    # ... and once gone, its tokens are refused by the sidecar's verifier.
    verifier = verifier_for(cluster.secret(NS, "chat-jwks")["jwks.json"], tmp_path / "after")
    with pytest.raises(Exception, match="unknown_kid"):
        verifier.verify(old_token)
    reasons = [e["reason"] for e in cluster.events(NS)]
    assert {"KeyPublished", "KeyRotated", "KeyRetired"} <= set(reasons)
    # The resume keys (one a line, the first seals) rotate on the same schedule: a new key is
    # listed last for `pre` seconds, then comes first with the old one second; 3 lines at most.
    assert all(len(lines) <= 3 for _, lines in resume_lists)
    assert max(len(lines) for _, lines in resume_lists) == 3
    listed = {lines[-1]: t for t, lines in resume_lists if len(lines) > 1}
    promotions = [(before, after, t) for (_, before), (t, after)
                  in itertools.pairwise(resume_lists) if after[0] != before[0]]
    assert len(promotions) >= 2
    for before, after, t in promotions:
        assert after[:2] == [before[-1], before[0]]
        assert t - listed[after[0]] >= pre - 0.5
    # The operator still rotates: it writes the Secret, then patches status, so a snapshot read
    # between the two disagrees for a moment (CI saw one); status catches up within seconds.
    deadline = time.monotonic() + 15
    while True:
        status = (cluster.agentchat(NS, "chat") or {})["status"]["resumeKeys"]
        lines = cluster.secret(NS, "chat-service-token")["resume-key"].splitlines()  # type: ignore[index]
        agree = (len(status["ring"]) == len(lines) and status["ring"][0]["stage"] == "current"
                 and hashlib.sha256(lines[0].encode()).hexdigest()[:12] == status["current"])
        if agree or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(status["ring"]) == len(lines) and status["ring"][0]["stage"] == "current"
    assert hashlib.sha256(lines[0].encode()).hexdigest()[:12] == status["current"]


def _b64d(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
