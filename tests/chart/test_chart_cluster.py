"""The chart on a real cluster (issue 23): uninstall that cannot deadlock, the operator without
a single point of failure, least-privilege RBAC by name, the native sidecar only where the
cluster has it, a drain before SIGTERM, ss-tools' access to the JWKS, and the CRD's rules
refused by the chart too. All with the real helm."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.chart import CHART, OLDEST, OLDEST_NATIVE, HelmError, by_kind, matrix, one, render

MATRIX = matrix()
DEFAULT = MATRIX["default"]
HOOK = "pre-delete"


def _hook(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind)
             if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == HOOK]
    assert len(found) == 1, [d["metadata"]["name"] for d in found]
    return found[0]


def _allows(role: dict[str, Any], verb: str, resource: str, name: str) -> bool:
    return any(verb in r["verbs"] and resource in r["resources"]
               and (not r.get("resourceNames") or name in r["resourceNames"])
               for r in role["rules"])


@pytest.mark.parametrize(("sets", "wait"), [({}, "60"), ({"operator.enabled": False}, "0")])
def test_the_pre_delete_hook_deletes_the_agentchat_with_its_own_rbac(
        sets: dict[str, Any], wait: str) -> None:
    docs = render(DEFAULT, sets)
    resource = one(docs, "AgentChat")
    name = resource["metadata"]["name"]
    job = _hook(docs, "Job")
    pod = job["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[:2] == ["operator", "finalize"]
    assert args[args.index("--name") + 1] == name
    assert args[args.index("--namespace") + 1] == resource["metadata"]["namespace"]
    # With the operator disabled nothing would release the finalizer: at once.
    assert args[args.index("--wait") + 1] == wait
    role, binding, account = (_hook(docs, k) for k in ("Role", "RoleBinding",
                                                        "ServiceAccount"))
    for verb in ("get", "delete", "patch"):
        assert _allows(role, verb, "agentchats", name), verb
    assert not _allows(role, "delete", "agentchats", "another-release")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == account["metadata"]["name"] == \
        pod["serviceAccountName"]
    # Its RBAC exists before the Job runs, and everything goes once it succeeded.
    weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"])
              for d in (role, binding, account, job)}
    assert max(weight["Role"], weight["RoleBinding"], weight["ServiceAccount"]) < weight["Job"]
    for d in (role, binding, account, job):
        assert "hook-succeeded" in d["metadata"]["annotations"]["helm.sh/hook-delete-policy"]


def test_the_operator_runs_two_peered_replicas_for_its_own_release() -> None:
    docs = render(DEFAULT, {"operator.priorityClassName": "platform-critical"})
    deployment = one(docs, "Deployment", "-operator")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "platform-critical"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert "--standalone" not in pod["containers"][0]["args"]
    peering = one(docs, "KopfPeering")
    assert env["AGENTCHAT_OPERATOR_PEERING"] == peering["metadata"]["name"]
    resource = one(docs, "AgentChat")
    assert env["AGENTCHAT_OPERATOR_INSTANCE"] == \
        resource["metadata"]["labels"]["app.kubernetes.io/instance"] == "t"
    # kopf's peering CRD ships in crds/ (installed before the templates, never deleted).
    assert (CHART / "crds" / "kopf.dev_kopfpeerings.yaml").exists()
    role = one(docs, "Role", "-operator")
    assert _allows(role, "patch", "kopfpeerings", peering["metadata"]["name"])
    assert _allows(role, "update", "agentchats/finalizers", resource["metadata"]["name"])


def test_the_operator_role_names_exactly_its_objects() -> None:
    docs = render(DEFAULT, {"agentChat.spec.names.jwksConfigMap": "t-agentchat-public"})
    role = one(docs, "Role", "-operator")
    for secret in ("t-agentchat-signing-keys", "t-agentchat-jwks", "t-agentchat-service-token"):
        assert _allows(role, "patch", "secrets", secret)
    assert _allows(role, "get", "configmaps", "t-agentchat-public")
    assert not _allows(role, "get", "configmaps", "t-agentchat-jwks")
    assert not _allows(role, "get", "secrets", "some-other-secret")
    assert not _allows(role, "patch", "secrets", "agentchat-db")
    assert _allows(role, "get", "secrets", "agentchat-db") or \
        _allows(role, "get", "secrets", "t-agentchat-secrets")


@pytest.mark.parametrize(("sets", "message"), [
    ({"agentChat.spec.names.jwksSecret": "database-credentials"}, "must start with"),
    ({"agentChat.spec.serviceToken.refreshMarginSeconds": 3600}, "refreshMarginSeconds"),
    ({"agentChat.spec.signingKeys.overlapSeconds": 3600}, "overlapSeconds"),
    ({"agentChat.spec.signingKeys.rotationIntervalSeconds": 600}, "prePublicationSeconds"),
    ({"agentChat.spec.signingKeys.prePublicationSeconds": 60}, "minimum"),
    ({"agent.terminationGracePeriodSeconds": 30}, "terminationGracePeriodSeconds"),
])
def test_the_chart_refuses_what_the_crd_would(sets: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        render(DEFAULT, sets)


def _agent_pod(version: str, sets: dict[str, Any] | None = None) -> dict[str, Any]:
    docs = render(DEFAULT, sets, kube_version=version)
    return dict(one(docs, "Deployment", "-agent")["spec"]["template"]["spec"])


def test_the_native_sidecar_only_where_the_cluster_has_it() -> None:
    old = _agent_pod(OLDEST)
    assert "policy" in [c["name"] for c in old["containers"]]
    assert not [c for c in old.get("initContainers", []) if c["name"] == "policy"]
    new = _agent_pod(OLDEST_NATIVE)
    [sidecar] = [c for c in new["initContainers"] if c["name"] == "policy"]
    assert sidecar["restartPolicy"] == "Always"
    assert "policy" not in [c["name"] for c in new["containers"]]


@pytest.mark.parametrize("version", [OLDEST, OLDEST_NATIVE])
def test_the_agent_drains_before_sigterm_and_finishes_before_sigkill(version: str) -> None:
    pod = _agent_pod(version, {"agent.drainSeconds": 40, "agent.preStopSleepSeconds": 7,
                               "agent.terminationGracePeriodSeconds": 70})
    agent = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["AGENTCHAT_AGENT_DRAIN_S"] == "40"
    assert "time.sleep(7)" in agent["lifecycle"]["preStop"]["exec"]["command"][-1]
    assert pod["terminationGracePeriodSeconds"] > 7 + 40
    plain = [c for c in pod["containers"] if c["name"] == "policy"]
    if plain:  # a plain sidecar outlives the agent's drain
        assert "time.sleep(47)" in plain[0]["lifecycle"]["preStop"]["exec"]["command"][-1]


def test_ss_tools_can_read_the_jwks_across_namespaces() -> None:
    docs = render(DEFAULT, {
        "ssTools.jwksReader.serviceAccount": "sstools-api",
        "ssTools.jwksReader.namespace": "ss-tools",
        "networkPolicy.jwksFromNamespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": "ss-tools"}},
    })
    role = one(docs, "Role", "-jwks-reader")
    assert _allows(role, "get", "configmaps", "t-agentchat-jwks")
    assert not _allows(role, "get", "configmaps", "t-agentchat-env")
    assert not [r for r in role["rules"] if "secrets" in r["resources"]]
    binding = one(docs, "RoleBinding", "-jwks-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sstools-api",
                                    "namespace": "ss-tools"}]
    policy = one(docs, "NetworkPolicy", "-agent")
    peers = [p for rule in policy["spec"]["ingress"] for p in rule["from"]]
    assert {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "ss-tools"}}} in peers
    # Off by default: no reader RBAC, no extra rule.
    plain = render(DEFAULT)
    assert not [d for d in by_kind(plain, "Role") if d["metadata"]["name"].endswith("-reader")]
    with pytest.raises(HelmError, match="namespace"):
        render(DEFAULT, {"ssTools.jwksReader.serviceAccount": "sstools-api"})


def test_the_default_pre_publication_covers_kubelet_and_a_ten_minute_jwks_cache() -> None:
    spec = one(render(DEFAULT), "AgentChat")["spec"]
    assert spec["signingKeys"]["prePublicationSeconds"] >= 120 + 600
    assert spec["serviceToken"] == {**spec["serviceToken"], "lifetimeSeconds": 3600,
                                    "refreshMarginSeconds": 2700}
