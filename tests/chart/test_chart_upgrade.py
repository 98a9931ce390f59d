"""Upgrades as a tested path (issue 37 item 1), through the real helm.

- The chart's version is SemVer and moves whenever what it installs changes (a digest per
  released version in released_charts.json; refresh it with the bump).
- The last release's values (ci/previous-values.yaml) render the current chart alone, as
  `--reuse-values` carries them (the chart's own values.yaml replaced), and over the new
  defaults, as `--reset-then-reuse-values` does (the matrix's `previous` case).
- Objects of a CRD render only where the API serves it; an upgrade without it fails with the
  command that fixes it; `crds.install` carries the CRDs in the release, kept on uninstall.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from testkit.chart import (
    CHART,
    OLDEST_NATIVE,
    RELEASES,
    ROOT,
    HelmError,
    by_kind,
    chart_digest,
    chart_version,
    one,
    run_helm,
)

PREVIOUS = CHART / "ci" / "previous-values.yaml"  # chart 0.1.0's, the oldest upgraded from
LAST_RELEASE = CHART / "ci" / "release-0.5.0.yaml"  # the release before this chart
DEFAULT = CHART / "ci" / "default-values.yaml"
APIS = ["kopf.dev/v1/KopfPeering", "agentchat.sstools.io/v1/AgentChat"]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")


def _template(chart: Path, *args: str, upgrade: bool = False,
              apis: list[str] | None = None) -> list[dict[str, Any]]:
    flags = ["--is-upgrade"] if upgrade else []
    for api in apis or []:
        flags += ["--api-versions", api]
    out = run_helm("template", "t", str(chart), "--namespace", "agentchat",
                   "--kube-version", OLDEST_NATIVE, *flags, *args)
    return [d for d in yaml.safe_load_all(out) if d]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("-")[0].split("."))


def test_the_version_is_semver_and_moves_with_the_chart() -> None:
    released = json.loads(RELEASES.read_text())
    version = chart_version()
    assert SEMVER.match(version), version
    assert version in released, (
        f"Chart.yaml's version {version} has no recorded digest: record "
        f'"{version}": "{chart_digest()}" in {RELEASES.relative_to(ROOT)}')
    assert released[version] == chart_digest(), (
        f"the chart changed since {version} was recorded: bump Chart.yaml's version (SemVer) "
        f"and record its digest {chart_digest()}")
    assert len(set(released.values())) == len(released), "two versions with the same chart"
    assert max(released, key=_key) == version, "the current version must be the newest"


def test_a_changed_template_changes_the_digest(tmp_path: Path) -> None:
    copy = tmp_path / "agentchat"
    shutil.copytree(CHART, copy)
    before = chart_digest(copy)
    pdb = copy / "templates" / "agent" / "pdb.yaml"
    pdb.write_text(pdb.read_text().replace("maxUnavailable:", "minAvailable:"))
    assert chart_digest(copy) != before
    (copy / "ci" / "extra-values.yaml").write_text("{}\n")  # ci/ is not the chart
    readme = copy / "README.md"
    readme.write_text(readme.read_text() + "\nmore\n")
    assert chart_digest(copy) == chart_digest(copy)


def _validate(docs: list[dict[str, Any]]) -> list[str]:
    errors = []
    for doc in docs:
        if doc["kind"] in {"AgentChat", "KopfPeering", "ServiceMonitor", "PrometheusRule"}:
            continue
        try:
            kv.validate(doc, OLDEST_NATIVE, strict=True)
        except kv.ValidationError as e:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {e.message}")
    return errors


@pytest.mark.parametrize(("previous", "dropped"), [
    (LAST_RELEASE, []), (PREVIOUS, []), (PREVIOUS, [["ui"], ["ssTools", "jwksReader"]])],
    ids=["release-0.5.0", "release-0.1.0", "before-the-page-and-jwks-reader"])
def test_reuse_values_of_the_last_release_render(tmp_path: Path, previous: Path,
                                                 dropped: list[list[str]]) -> None:
    """`helm upgrade --reuse-values`: the previous release's values are all the chart gets
    (0.5.0's, and those of releases older still, without `ui` and `ssTools.jwksReader`)."""
    copy = tmp_path / "agentchat"
    shutil.copytree(CHART, copy)
    values = yaml.safe_load(previous.read_text())
    for path in dropped:
        node = values
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    (copy / "values.yaml").write_text(yaml.safe_dump(values))
    docs = _template(copy, upgrade=True, apis=APIS)
    assert _validate(docs) == []
    hook = one(docs, "Job", "-uninstall")["spec"]["template"]["spec"]["containers"][0]
    assert hook["args"][hook["args"].index("--wait") + 1] == "60"
    # What the new chart adds works on old values: the migration Job, both PDBs, the spread.
    assert one(docs, "Job", "-migrate")
    assert one(docs, "PodDisruptionBudget", "-operator")["spec"]["maxUnavailable"] == 1
    assert one(docs, "PodDisruptionBudget", "-agent")["spec"][
        "unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    env = one(docs, "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_MIGRATE_ON_START"] == "false"
    assert env["AGENTCHAT_AGENT_UI_ENABLED"] == "false"
    assert one(docs, "KopfPeering")
    # Values without `upstreams` (0.6.0's): the agent's default folder, no upstream mounted.
    assert env["AGENTCHAT_AGENT_UPSTREAM_SECRETS"] == "/var/run/secrets/agentchat/upstreams"
    agent = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    assert not [v for v in agent["volumes"] if v["name"].startswith("upstream-")]


@pytest.mark.parametrize("previous", [LAST_RELEASE, PREVIOUS], ids=["release-0.5.0",
                                                                   "release-0.1.0"])
def test_reset_then_reuse_values_keep_the_users_values_over_new_defaults(
        previous: Path) -> None:
    docs = _template(CHART, "-f", str(previous), upgrade=True, apis=APIS)
    assert _validate(docs) == []
    deploy = one(docs, "Deployment", "-agent")
    env_from = deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {
        "name": "agentchat-db", "key": "database-url"}}} in env_from


def test_an_upgrade_without_the_peering_crd_fails_with_the_fix() -> None:
    with pytest.raises(HelmError) as refused:
        _template(CHART, "-f", str(DEFAULT), upgrade=True)
    message = str(refused.value)
    assert "kopf.dev/v1/KopfPeering" in message or "AgentChat" in message
    assert (f"helm show crds agentchat --version {chart_version()} | "
            "kubectl apply --server-side -f -") in message
    # The cluster serving both: the objects render; an install applies crds/ first.
    for docs in (_template(CHART, "-f", str(DEFAULT), upgrade=True, apis=APIS),
                 _template(CHART, "-f", str(DEFAULT))):
        assert one(docs, "KopfPeering") and one(docs, "AgentChat")
        assert not by_kind(docs, "CustomResourceDefinition")


def test_crds_install_carries_the_crds_kept_on_uninstall() -> None:
    docs = _template(CHART, "-f", str(DEFAULT), "--set", "crds.install=true", upgrade=True)
    crds = {d["metadata"]["name"]: d for d in by_kind(docs, "CustomResourceDefinition")}
    assert set(crds) == {"agentchats.agentchat.sstools.io", "kopfpeerings.kopf.dev"}
    for name, crd in crds.items():
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        shipped = next(yaml.safe_load(p.read_text()) for p in (CHART / "crds").glob("*.yaml")
                       if yaml.safe_load(p.read_text())["metadata"]["name"] == name)
        assert crd["spec"] == shipped["spec"]
    assert _validate(docs) == []
    # Not served yet: their objects wait for the next upgrade instead of failing this one.
    assert not by_kind(docs, "KopfPeering") and not by_kind(docs, "AgentChat")
    served = _template(CHART, "-f", str(DEFAULT), "--set", "crds.install=true",
                       upgrade=True, apis=APIS)
    assert one(served, "KopfPeering") and one(served, "AgentChat")


def test_docs_recommend_reset_then_reuse_values() -> None:
    for path in (ROOT / "README.md", CHART / "README.md", CHART / "templates" / "NOTES.txt"):
        commands = [line for line in path.read_text().splitlines() if "helm upgrade" in line
                    and "reuse-values" in line]
        assert commands, path
        for line in commands:  # every upgrade command shown keeps the new defaults
            assert re.sub(r"--reset-then-reuse-values", "", line).count("--reuse-values") == 0, \
                (path, line)


# What chart 0.3 (the first with approvals) had under `approvals`, a webhook URL among it.
APPROVALS_0_3 = {
    "publicUrl": "https://ss.example.com",
    "webhook": {"url": "https://hooks.slack.com/services/T0/B0/s3cr3t",
                "existingSecret": "agentchat-approvals", "existingSecretKey": "webhook-secret"},
    "email": {"smtpUrl": "", "existingSecret": "", "existingSecretKey": "smtp-url",
              "from": "agentchat@localhost", "to": {}, "escalationTo": {}},
}


def test_a_release_with_the_webhook_url_in_values_is_told_what_to_set(tmp_path: Path) -> None:
    """The webhook URL is a bearer secret, read from a Secret only since 0.4: an upgrade that
    carries the old value fails, naming the Secret and key to put it in, and never prints it."""
    values = {**yaml.safe_load(PREVIOUS.read_text()), "approvals": APPROVALS_0_3}
    copy = tmp_path / "agentchat"
    shutil.copytree(CHART, copy)
    (copy / "values.yaml").write_text(yaml.safe_dump(values))  # --reuse-values
    old = tmp_path / "old-values.yaml"
    old.write_text(yaml.safe_dump(values))
    for chart, args in ((copy, []), (CHART, ["-f", str(old)])):  # and --reset-then-reuse
        with pytest.raises(HelmError) as refused:
            _template(chart, *args, upgrade=True, apis=APIS)
        message = str(refused.value)
        assert ("Put it in the Secret agentchat-approvals under the key webhook-url, set "
                "approvals.webhook.enabled=true") in message
        assert "s3cr3t" not in message
    # Done as told: the URL comes from that Secret.
    docs = _template(CHART, "-f", str(old), "--set", "approvals.webhook.url=null",
                     "--set", "approvals.webhook.enabled=true", upgrade=True, apis=APIS)
    agent = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {
        "name": "agentchat-approvals", "key": "webhook-url"}}} in agent["env"]


def test_an_upgrade_leaves_the_objects_an_earlier_operator_made_to_it(tmp_path: Path) -> None:
    """Before 0.4 the operator created its Secrets and ConfigMap itself. Helm refuses to adopt
    objects it did not make, so the chart looks (`lookup`, here against the API emulator
    through `--dry-run=server`) and renders only those that are absent or Helm's own; the
    operator keeps patching the others by name, and they stay owned by the AgentChat."""
    from testkit.kube_emulator import KubeEmulator

    cluster = KubeEmulator(tmp_path).start()
    try:
        ns = "agentchat"

        def make(kind: str, name: str, meta: dict[str, Any]) -> None:
            plural = kind.lower() + "s"
            cluster.create(f"/api/v1/namespaces/{ns}/{plural}", {
                "apiVersion": "v1", "kind": kind, "metadata": {"name": name, **meta},
                "data": {"jwks.json" if kind == "ConfigMap" else "x": "e30="}})

        operators = {"labels": {"app.kubernetes.io/managed-by": "agentchat-operator"}}
        make("Secret", "t-agentchat-signing-keys", operators)
        make("Secret", "t-agentchat-service-token", operators)
        make("Secret", "t-agentchat-jwks", {"annotations": {  # made by Helm (0.4) already
            "meta.helm.sh/release-name": "t", "meta.helm.sh/release-namespace": ns}})
        out = run_helm("template", "t", str(CHART), "--namespace", ns, "-f", str(DEFAULT),
                       "--is-upgrade", "--dry-run=server", "--kubeconfig",
                       str(cluster.kubeconfig), *[f"--api-versions={a}" for a in APIS])
    finally:
        cluster.stop()
    kept = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d
            and (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy")}
    assert kept == {("Secret", "t-agentchat-jwks"), ("ConfigMap", "t-agentchat-jwks")}
