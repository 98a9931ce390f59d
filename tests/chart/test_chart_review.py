"""What a reviewer checks by eye, over every values set: hardened containers, probes, folder mounts,
checksums that change exactly when their inputs do, labels and selectors, the ingress routes,
and the shipped files equal to their sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.chart import (
    CHART,
    ROOT,
    by_kind,
    containers,
    matrix,
    one,
    pod_specs,
    render,
)

MATRIX = matrix()
DEFAULT = MATRIX["default"]


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_container_is_non_root_and_read_only(case: str) -> None:
    for name, spec in pod_specs(render(MATRIX[case])):
        pod_ctx = spec.get("securityContext", {})
        assert pod_ctx.get("runAsNonRoot") is True, name
        assert pod_ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        for c in containers(spec):
            ctx = c["securityContext"]
            where = f"{name}/{c['name']}"
            assert ctx["runAsNonRoot"] is True, where
            assert ctx["readOnlyRootFilesystem"] is True, where
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert ctx["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in ctx["capabilities"], where
            assert c.get("resources", {}).get("requests"), f"{where} has no requests"
            assert c["resources"].get("limits", {}).get("memory"), f"{where} has no memory limit"


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_long_running_containers_have_probes(case: str) -> None:
    for name, spec in pod_specs(render(MATRIX[case])):
        if spec.get("restartPolicy") == "Never":
            continue  # the helm test pod runs once
        long_running = [*spec["containers"], *(c for c in spec.get("initContainers", [])
                                               if c.get("restartPolicy") == "Always")]
        for c in long_running:
            assert "livenessProbe" in c, f"{name}/{c['name']}"
            if c["name"] != "operator":  # no Service sends it traffic
                assert "readinessProbe" in c, f"{name}/{c['name']}"


def test_agent_probes_and_sidecar_on_loopback() -> None:
    agent_pod = one(render(DEFAULT), "Deployment", "-agent")["spec"]["template"]["spec"]
    [agent] = agent_pod["containers"]
    assert agent["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert agent["startupProbe"]["httpGet"]["path"] == "/livez"
    # Native sidecar: an init container that keeps running.
    [policy] = [c for c in agent_pod["initContainers"] if c["name"] == "policy"]
    assert policy["restartPolicy"] == "Always"
    assert policy["args"][-4:] == ["--host", "127.0.0.1", "--port", "8181"]
    assert "ports" not in policy  # nothing to expose: loopback only
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz"),
                        ("startupProbe", "/livez")):
        command = policy[probe]["exec"]["command"]
        assert command[0] == "python" and f"http://127.0.0.1:8181{path}" in command[-1]
    env = one(render(DEFAULT), "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_AGENT_POLICY_URL"] == "http://127.0.0.1:8181"


def test_plain_sidecar_switch() -> None:
    pod = one(render(MATRIX["plain-sidecar"]), "Deployment", "-agent")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["agent", "policy"]
    assert "initContainers" not in pod
    assert all("restartPolicy" not in c for c in pod["containers"])


def _mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container["volumeMounts"]}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_folders_are_mounted_without_subpath(case: str) -> None:
    """kubelet never updates a subPath mount: policy, catalog and keys would go stale."""
    for name, spec in pod_specs(render(MATRIX[case])):
        for c in containers(spec):
            for m in c.get("volumeMounts", []):
                assert "subPath" not in m and "subPathExpr" not in m, f"{name}/{c['name']}"


def test_agent_pod_mounts_follow_the_runtime_contract() -> None:
    docs = render(DEFAULT)
    pod = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    agent = _mounts(pod["containers"][0])
    policy = _mounts(next(c for c in pod["initContainers"] if c["name"] == "policy"))
    for mounts in (agent, policy):
        assert mounts["/etc/agentchat/catalog"]["name"] == "catalog"
        assert mounts["/etc/agentchat/jwks"]["name"] == "jwks"
        assert mounts["/etc/agentchat/user-jwks"]["name"] == "user-jwks"
        assert mounts["/tmp"]["name"] == "tmp"
    assert policy["/etc/agentchat/policy"]["name"] == "policy"
    assert agent["/var/run/agentchat/service-token"]["name"] == "service-token"
    assert "/var/run/agentchat/service-token" not in policy
    assert volumes["jwks"]["secret"]["secretName"] == "t-agentchat-jwks"
    assert volumes["service-token"]["secret"]["secretName"] == "t-agentchat-service-token"
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
    # The signing keys (private) are never in the agent pod.
    assert not any("signing-keys" in str(v) for v in pod["volumes"])
    # The policy and its tests: two ConfigMaps mounted whole (no items), the tests in the
    # sidecar only, at AGENTCHAT_POLICY_TESTS_DIR.
    assert volumes["policy"]["configMap"] == {"name": "t-agentchat-policy"}
    assert volumes["policy-tests"]["configMap"] == {"name": "t-agentchat-policy-tests"}
    assert policy["/etc/agentchat/policy-tests"]["name"] == "policy-tests"
    assert "/etc/agentchat/policy-tests" not in agent
    env = one(docs, "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_POLICY_TESTS_DIR"] == "/etc/agentchat/policy-tests"
    assert env["AGENTCHAT_CATALOG_PATH"] == "/etc/agentchat/catalog/catalog.yaml"
    assert env["AGENTCHAT_POLICY_DIR"] == "/etc/agentchat/policy"
    assert env["AGENTCHAT_SERVICE_JWKS_PATH"] == "/etc/agentchat/jwks/jwks.json"
    assert env["AGENTCHAT_USER_JWKS_PATH"] == "/etc/agentchat/user-jwks/jwks.json"
    assert env["AGENTCHAT_AGENT_SERVICE_TOKEN_FILE"] == "/var/run/agentchat/service-token/token"
    assert env["AGENTCHAT_DATA_DIR"].startswith("/tmp/")


def _checksums(sets: dict[str, Any], files: list[Path] | None = None) -> dict[str, dict[str, str]]:
    docs = render(files or DEFAULT, sets)
    return {d["metadata"]["name"]: {k: v for k, v in
                                    d["spec"]["template"]["metadata"]["annotations"].items()
                                    if k.startswith("checksum/")}
            for d in by_kind(docs, "Deployment")}


@pytest.mark.parametrize(("sets", "changed"), [
    ({}, set()),
    ({"agent.replicaCount": 5}, set()),
    # Reloaded live: a restart would cut every stream, and is not needed.
    ({"policy.rules": "g, editor, viewer\np, viewer, *, read, allow\n"}, set()),
    ({"policy.tests.extra\\.yaml": "cases: []\n"}, set()),
    ({"catalog.inline": "version: 1\ntools: []\n"}, set()),
    # Another JWKS ConfigMap changes the pod's volume (so the pods roll), not the settings.
    ({"identity.user.jwks.existingConfigMap": "other-jwks"}, set()),
    # Read once at start: the pods must roll.
    ({"llm.model": "openai:gpt-4o-mini"}, {"checksum/config"}),
    ({"extraConfig.AGENTCHAT_AGENT_CONFIRMATION_TTL_S": "600"}, {"checksum/config"}),
    ({"identity.user.audience": "other"}, {"checksum/config"}),
])
def test_checksums_change_exactly_when_their_inputs_change(sets: dict[str, Any],
                                                           changed: set[str]) -> None:
    before, after = _checksums({}), _checksums(sets)
    agent = "t-agentchat-agent"
    assert set(before[agent]) == {"checksum/config"}  # no chart Secret in these values
    diff = {k for k in before[agent] if before[agent][k] != after[agent].get(k)}
    assert diff == changed


def test_secret_checksum_tracks_the_chart_secret_only() -> None:
    files = MATRIX["plain-sidecar"]  # database.url and llm.apiKey given as values
    base = _checksums({}, files)["t-agentchat-agent"]
    assert set(base) == {"checksum/config", "checksum/secret"}
    key = _checksums({"llm.apiKey": "sk-another"}, files)["t-agentchat-agent"]
    assert key["checksum/secret"] != base["checksum/secret"]
    assert key["checksum/config"] == base["checksum/config"]
    rules = _checksums({"policy.rules": "g, a, b\n"}, files)["t-agentchat-agent"]
    assert rules == base


def test_no_generated_secrets() -> None:
    """Two renders give identical objects: nothing random survives into an upgrade."""
    for files in MATRIX.values():
        assert render(files) == render(files)
    for path in (CHART / "templates").rglob("*"):
        if path.is_file():
            text = path.read_text()
            for generator in ("randAlpha", "randAscii", "randBytes", "genPrivateKey", "uuidv4"):
                assert generator not in text, f"{path.name} uses {generator}"


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_labels_and_minimal_selectors(case: str) -> None:
    docs = render(MATRIX[case], {"commonLabels.team": "platform"})
    for d in docs:
        labels = d["metadata"].get("labels", {})
        where = f"{d['kind']}/{d['metadata']['name']}"
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                    "app.kubernetes.io/component", "app.kubernetes.io/managed-by",
                    "app.kubernetes.io/version", "helm.sh/chart"):
            assert key in labels, where
        assert labels["team"] == "platform", where
    for d in [*by_kind(docs, "Deployment"), *by_kind(docs, "StatefulSet")]:
        selector = d["spec"]["selector"]["matchLabels"]
        assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                                 "app.kubernetes.io/component"}
        assert selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    for s in by_kind(docs, "Service"):
        assert "team" not in s["spec"]["selector"]


def test_selectors_do_not_change_on_upgrade() -> None:
    """A Deployment's selector is immutable: values and versions must never reach it."""
    first = render(DEFAULT)
    later = render(DEFAULT, {"commonLabels.team": "x", "agent.podLabels.tier": "web",
                             "agent.image.tag": "9.9.9"})
    for a, b in zip(by_kind(first, "Deployment"), by_kind(later, "Deployment"), strict=True):
        assert a["spec"]["selector"] == b["spec"]["selector"]


# The MCP endpoint's RFC 9728 metadata (docs/protocol.md §12), an Exact path of its own.
MCP_METADATA = "/.well-known/oauth-protected-resource/api/agent/mcp"


def test_ingress_routes_and_streaming() -> None:
    ingress = one(render(MATRIX["ingress-tls"]), "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 600
    assert annotations["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["sstools.example.com"],
                                       "secretName": "sstools-tls"}]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "sstools.example.com"
    paths = [p["path"] for p in rule["http"]["paths"]]
    assert paths == [MCP_METADATA, "/api/agent/gradio", "/api/agent", "/api/assistant"]
    # Left to an existing ss-tools backend:
    other = one(render(MATRIX["existing-secrets"]), "Ingress")
    assert [p["path"] for p in other["spec"]["rules"][0]["http"]["paths"]] == [
        MCP_METADATA, "/api/agent/gradio", "/api/agent"]


def test_network_policy_admits_only_the_ingress_and_labelled_clients() -> None:
    docs = render(DEFAULT)
    policy = one(docs, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    test_pod = one(docs, "Pod")
    client_peer = rule["from"][1]["podSelector"]["matchLabels"]
    assert client_peer.items() <= test_pod["metadata"]["labels"].items()
    # The sidecar's port is opened by no rule; it is not even bound outside loopback.
    assert all(p["port"] != 8181 for r in policy["spec"]["ingress"] for p in r["ports"])


def test_helm_test_reads_readyz_through_the_service() -> None:
    docs = render(DEFAULT)
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    service = one(docs, "Service")
    script = pod["spec"]["containers"][0]["command"][-1]
    port = service["spec"]["ports"][0]["port"]
    assert f"http://{service['metadata']['name']}:{port}/readyz" in script


def test_operator_rbac_is_namespaced_and_minimal() -> None:
    docs = render(DEFAULT)
    assert by_kind(docs, "ClusterRole") == [] and by_kind(docs, "ClusterRoleBinding") == []
    role = one(docs, "Role", "-operator")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "delete" not in rule["verbs"]
        if {"secrets", "configmaps"} & set(rule["resources"]):
            # Nothing lists, watches or creates Secrets; get and patch only by name.
            assert set(rule["verbs"]) <= {"get", "patch"} and rule.get("resourceNames"), rule
        if rule["resources"] == ["events"]:
            assert rule["verbs"] == ["create"]
    # What it may patch, the chart creates, empty and kept by Helm (the operator adopts them
    # into the AgentChat, so its deletion collects them): no `create` needed.
    patched = {(r, n) for rule in role["rules"] if "patch" in rule["verbs"]
               for r in rule["resources"] if r in ("secrets", "configmaps")
               for n in rule["resourceNames"]}
    kept = [d for d in docs if d["kind"] in ("Secret", "ConfigMap") and (
        d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"]
    assert patched == {(d["kind"].lower() + "s", d["metadata"]["name"]) for d in kept} == {
        ("secrets", "t-agentchat-signing-keys"), ("secrets", "t-agentchat-jwks"),
        ("secrets", "t-agentchat-service-token"), ("configmaps", "t-agentchat-jwks")}
    for d in kept:
        assert "data" not in d and "stringData" not in d  # what the operator writes stays
        assert d["metadata"]["labels"]["agentchat.sstools.io/instance"] == "t-agentchat"
    # The agent starts once the operator has filled them: the keys are named in the volumes.
    volumes = {v["name"]: v for v in one(docs, "Deployment", "-agent")["spec"]["template"][
        "spec"]["volumes"]}
    assert volumes["service-token"]["secret"]["items"] == [
        {"key": "token", "path": "token"}, {"key": "resume-key", "path": "resume-key"}]
    assert volumes["jwks"]["secret"]["items"] == [{"key": "jwks.json", "path": "jwks.json"}]
    binding = one(docs, "RoleBinding", "-operator")
    operator_pod = one(docs, "Deployment", "-operator")["spec"]["template"]["spec"]
    assert binding["subjects"][0]["name"] == operator_pod["serviceAccountName"]
    agent_pod = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    assert agent_pod["automountServiceAccountToken"] is False
    off = render(MATRIX["operator-off"])
    assert not [d for d in off if d["metadata"]["labels"].get("app.kubernetes.io/component")
                == "operator"]


def test_dev_profile_runs_sandbox_and_official_postgres() -> None:
    docs = render(MATRIX["dev"])
    postgres = one(docs, "StatefulSet", "-postgresql")
    image = postgres["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("docker.io/library/postgres:")
    one(docs, "Deployment", "-sandbox")
    env = one(docs, "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_MODE"] == "dev"
    assert env["AGENTCHAT_AGENT_SSTOOLS_URL"] == "http://t-agentchat-sandbox:8800"
    secret = one(docs, "Secret", "-secrets")
    assert set(secret["data"]) == {"database-url", "postgres-password"}


def _normalized(text: str) -> str:
    return text.rstrip("\n") + "\n"


def test_shipped_files_equal_their_sources() -> None:
    """Charts cannot read outside themselves: files/ holds copies, kept equal here.
    To refresh: cp agentchat/data/catalog.yaml charts/agentchat/files/ &&
    rm -r charts/agentchat/files/policy && cp -r agentchat/data/policy charts/agentchat/files/"""
    assert (CHART / "files/catalog.yaml").read_bytes() == \
        (ROOT / "agentchat/data/catalog.yaml").read_bytes()
    source = ROOT / "agentchat/data/policy"
    ours = CHART / "files/policy"
    rel = lambda root: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())  # noqa: E731
    assert rel(ours) == rel(source)
    for name in rel(source):
        assert (ours / name).read_bytes() == (source / name).read_bytes(), name


def test_configmaps_carry_the_files_exactly() -> None:
    docs = render(DEFAULT)
    catalog = one(docs, "ConfigMap", "-catalog")["data"]["catalog.yaml"]
    assert _normalized(catalog) == _normalized((ROOT / "agentchat/data/catalog.yaml").read_text())
    assert yaml.safe_load(catalog) == yaml.safe_load(
        (ROOT / "agentchat/data/catalog.yaml").read_text())
    policy = one(docs, "ConfigMap", "-policy")["data"]
    tests = one(docs, "ConfigMap", "-policy-tests")["data"]
    source = ROOT / "agentchat/data/policy"
    assert set(policy) == {p.name for p in source.iterdir() if p.is_file()}
    assert set(tests) == {p.name for p in (source / "tests").iterdir()}
    for path in source.rglob("*"):
        if path.is_file():
            data = tests if path.parent.name == "tests" else policy
            assert _normalized(data[path.name]) == _normalized(path.read_text()), path.name
