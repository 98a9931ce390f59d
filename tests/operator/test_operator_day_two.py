"""The operator on day two (issue 37 items 3 and 6), as processes against the API emulator.

- One writer: two operators acting at once (standalone, no peering: the worst case of a
  rolling update) on AgentChats created while both run. Every write is conditional on the
  resourceVersion read, so each AgentChat gets one key ring and one token, written once, and the
  token's key is in the published JWKS.
- Uninstall without the hook: the AgentChat deleted while its operator stops (`helm uninstall
  --no-hooks`, `kubectl delete namespace`) is released by the stopping operator, not left
  Terminating.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from test_operator_cluster import PATH, SPEC, _create, chart_operator
from test_operator_kopf import NS, cluster, conditions, operator_factory, verifier_for, wait_for

from agentchat.keys import KeyRing
from testkit.kube_emulator import KubeEmulator

__all__ = ["chart_operator", "cluster", "operator_factory"]

NAMES = ("one", "two", "three")


def test_two_operators_never_both_mint(cluster: KubeEmulator, operator_factory: Any,
                                       tmp_path: Path) -> None:
    first, second = operator_factory(), operator_factory()
    for name in NAMES:  # both already run: they see each resource at the same moment
        cluster.create_agentchat(NS, name, {"signingKeys": {"rotationIntervalSeconds": 3600}})
    for name in NAMES:
        wait_for(f"{name} Ready", lambda n=name: conditions(cluster, n).get("Ready", {}).get(
            "status") == "True")
    time.sleep(2.0)  # several ticks of both
    for name in NAMES:
        # One plan stored, never replaced by the other operator's.
        assert cluster.writes(NS, f"{name}-signing-keys") == 1, name
        assert cluster.writes(NS, f"{name}-service-token") == 1, name
        assert cluster.writes(NS, f"{name}-jwks") == 1, name
        ring = KeyRing.from_json(cluster.secret(NS, f"{name}-signing-keys")[
            "signing-keys.json"])
        assert [k.stage for k in ring.keys] == ["current"]
        jwks = cluster.secret(NS, f"{name}-jwks")["jwks.json"]
        token = cluster.secret(NS, f"{name}-service-token")["token"]
        principal = verifier_for(jwks, tmp_path / name).verify(token)
        assert principal.sub == "agentchat-agent"
        created = [e for e in cluster.events(NS) if e["reason"] == "KeyCreated"
                   and e["involvedObject"]["name"] == name]
        assert len(created) == 1, created
    assert first.proc and first.proc.poll() is None and second.proc and \
        second.proc.poll() is None


def test_the_stopping_operator_releases_what_is_being_deleted(
        cluster: KubeEmulator, chart_operator: Any) -> None:
    _create(cluster, "chat", "rel-a", SPEC)
    op = chart_operator()
    wait_for("the finalizer", lambda: (cluster.agentchat(NS, "chat") or {}).get(
        "metadata", {}).get("finalizers"))
    # The uninstall without its hook: the operator is told to stop, the AgentChat deleted.
    assert op.proc is not None
    op.proc.send_signal(signal.SIGTERM)
    cluster.delete(f"{PATH}/chat")
    op.proc.wait(30)
    wait_for("the AgentChat gone", lambda: cluster.agentchat(NS, "chat") is None, timeout=10)
    assert "released its finalizer" in op.log_tail()

    # Deleted once no operator runs at all: it stays (the README's manual way out releases it).
    _create(cluster, "chat", "rel-a", SPEC)
    again = chart_operator()
    wait_for("the finalizer again", lambda: (cluster.agentchat(NS, "chat") or {}).get(
        "metadata", {}).get("finalizers"))
    again.stop()
    cluster.delete(f"{PATH}/chat")
    time.sleep(1.0)
    assert (cluster.agentchat(NS, "chat") or {}).get("metadata", {}).get("deletionTimestamp")
    cluster.patch(f"{PATH}/chat", {"metadata": {"finalizers": None}})
    wait_for("released by hand", lambda: cluster.agentchat(NS, "chat") is None, timeout=10)
