"""The operator as the chart runs it (issue 23, items 1, 3 and 8): namespaced mode
(`--namespace`), two replicas sharing a KopfPeering, one release's AgentChat only (label
selector), and the uninstall hook's `agentchat operator finalize`, all against the API
emulator."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_operator_kopf import NS, cluster, conditions, wait_for

from agentchat.operator import constants as c
from testkit.kube_emulator import KubeEmulator
from testkit.support import AGENTCHAT, ROOT, Service, free_port, stop_all

__all__ = ["cluster"]

PEERING = "rel-a-operator"
PATH = f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{NS}/{c.PLURAL}"


def _env(cluster: KubeEmulator, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"KUBECONFIG": str(cluster.kubeconfig), "AGENTCHAT_OPERATOR_TUNING__TICK_S": "0.3",
            "AGENTCHAT_OPERATOR_TUNING__CONSISTENCY_TIMEOUT_S": "0", "AGENTCHAT_MODE": "dev",
            "AGENTCHAT_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", **extra}


@pytest.fixture
def chart_operator(cluster: KubeEmulator, tmp_path: Path) -> Iterator[Callable[[], Service]]:
    """`agentchat operator` with the chart's arguments: this namespace, the release's
    peering object and its instance label."""
    cluster.create(f"/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings", {
        "apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
        "metadata": {"name": PEERING, "namespace": NS}})
    started: list[Service] = []

    def start() -> Service:
        port = free_port()
        svc = Service(["operator", "--namespace", NS, "--peering", PEERING,
                       "--host", "127.0.0.1", "--port", str(port)],
                      env=_env(cluster, tmp_path, AGENTCHAT_OPERATOR_INSTANCE="rel-a",
                               AGENTCHAT_OPERATOR_TUNING__BACKOFF_BASE_S="0.5"),
                      port=port, ready_path="/healthz",
                      log=tmp_path / f"operator-{len(started)}.log").start()
        started.append(svc)
        return svc

    yield start
    stop_all(started)


def _create(cluster: KubeEmulator, name: str, release: str, spec: dict[str, Any]) -> None:
    cluster.create(PATH, {"apiVersion": c.API_VERSION, "kind": c.KIND,
                          "metadata": {"name": name, "namespace": NS,
                                       "labels": {c.LABEL_RELEASE: release}},
                          "spec": spec})


SPEC = {"signingKeys": {"prePublicationSeconds": 2}}


def _ready(cluster: KubeEmulator, name: str = "chat") -> bool:
    return conditions(cluster, name).get("Ready", {}).get("status") == "True"


def _chart_objects() -> list[dict[str, Any]]:
    """The operator's Secrets and ConfigMap as the chart creates them, empty, for release
    rel-a with the AgentChat named `chat`."""
    from testkit.chart import matrix, render

    docs = render(matrix()["default"], {"fullnameOverride": "chat"}, release="rel-a",
                  namespace=NS)
    return [d for d in docs if d["kind"] in ("Secret", "ConfigMap")
            and (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy")]


def test_namespaced_mode_fills_the_charts_objects_of_its_release_only(
        cluster: KubeEmulator, chart_operator: Any) -> None:
    """As the chart runs it: the Role grants no create on Secrets or ConfigMaps; the operator
    fills the empty objects the chart made, adopts them (collected with the AgentChat), and a
    deleted one is reported until `helm upgrade` makes it again."""
    objects = _chart_objects()
    assert sorted(o["metadata"]["name"] for o in objects) == [
        "chat-jwks", "chat-jwks", "chat-service-token", "chat-signing-keys"]
    for obj in objects:
        plural = "secrets" if obj["kind"] == "Secret" else "configmaps"
        cluster.create(f"/api/v1/namespaces/{NS}/{plural}", obj)
    cluster.forbid_create.update({"secrets", "configmaps"})
    _create(cluster, "chat", "rel-a", SPEC)
    _create(cluster, "other", "rel-b", SPEC)
    chart_operator()
    wait_for("Ready", lambda: _ready(cluster))
    assert set(cluster.secret(NS, "chat-service-token") or {}) >= {"token", "resume-key"}
    assert "signing-keys.json" in (cluster.secret(NS, "chat-signing-keys") or {})
    assert cluster.secret(NS, "chat-jwks") == cluster.config_map(NS, "chat-jwks")
    uid = cluster.agentchat(NS, "chat")["metadata"]["uid"]  # type: ignore[index]
    for plural in ("secrets", "configmaps"):
        obj = cluster.get(f"/api/v1/namespaces/{NS}/{plural}/chat-jwks") or {}
        assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [uid]
        assert obj["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    time.sleep(2.0)  # several ticks: the other release's resource stays untouched
    assert not (cluster.agentchat(NS, "other") or {}).get("status")

    token = f"/api/v1/namespaces/{NS}/secrets/chat-service-token"
    cluster.delete(token)
    wait_for("the missing Secret reported", lambda: "helm upgrade restores" in conditions(
        cluster, "chat").get("KeysRotated", {}).get("message", ""), timeout=60)
    assert cluster.secret(NS, "chat-service-token") is None  # never created by the operator
    cluster.create(f"/api/v1/namespaces/{NS}/secrets",
                   next(o for o in objects if o["metadata"]["name"] == "chat-service-token"))
    wait_for("the token written again", lambda: (cluster.secret(NS, "chat-service-token")
                                                 or {}).get("token"), timeout=60)
    peering = cluster.get(f"/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings/{PEERING}") or {}
    assert len(peering.get("status") or {}) == 1  # this replica announced itself


def test_a_second_replica_takes_over_when_the_first_stops(cluster: KubeEmulator,
                                                          chart_operator: Any) -> None:
    _create(cluster, "chat", "rel-a", SPEC)
    first = chart_operator()
    wait_for("Ready", lambda: _ready(cluster))
    chart_operator()
    peering = f"/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings/{PEERING}"
    wait_for("two peers", lambda: len((cluster.get(peering) or {}).get("status") or {}) == 2)
    first.stop()
    # The remaining replica acts: a lost token Secret is written again.
    cluster.delete(f"/api/v1/namespaces/{NS}/secrets/chat-service-token")
    wait_for("the token re-written by the second replica",
             lambda: cluster.secret(NS, "chat-service-token"), timeout=60)


def _finalize(cluster: KubeEmulator, wait: float) -> subprocess.CompletedProcess[str]:
    """The hook Job's command."""
    return subprocess.run([AGENTCHAT, "operator", "finalize", "--name", "chat",
                           "--namespace", NS, "--wait", str(wait)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                          env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})


def test_the_uninstall_hook_deletes_the_resource_with_or_without_the_operator(
        cluster: KubeEmulator, chart_operator: Any, tmp_path: Path) -> None:
    # With the operator running: it releases its own finalizer.
    _create(cluster, "chat", "rel-a", SPEC)
    op = chart_operator()
    wait_for("the finalizer", lambda: (cluster.agentchat(NS, "chat") or {}).get(
        "metadata", {}).get("finalizers"))
    done = _finalize(cluster, wait=60)
    assert done.returncode == 0, done.stderr
    assert cluster.agentchat(NS, "chat") is None
    assert "released" not in done.stdout

    # Operator gone (crashed, or operator.enabled=false after it ran): the hook releases it.
    _create(cluster, "chat", "rel-a", SPEC)
    wait_for("the finalizer again", lambda: (cluster.agentchat(NS, "chat") or {}).get(
        "metadata", {}).get("finalizers"))
    op.stop()
    started = time.monotonic()
    done = _finalize(cluster, wait=1)
    assert done.returncode == 0, done.stderr
    assert cluster.agentchat(NS, "chat") is None
    assert "finalizers released" in done.stdout and time.monotonic() - started < 30
    # Nothing is left to block a reinstall: creating it again works.
    _create(cluster, "chat", "rel-a", SPEC)
