"""Day two in the chart (issue 37 items 3, 4, 5, 7), through the real helm: drains and
spread, the uninstall hook that cannot hang the uninstall, the migration hook Job, and the
opt-in egress policies."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.chart import CHART, HelmError, by_kind, matrix, one, render

DEFAULT = matrix()["default"]
EGRESS = [CHART / "ci" / "egress-values.yaml"]


def _pod(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return dict(one(docs, kind, suffix)["spec"]["template"])


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def test_drains_never_wait_for_the_database_and_spread_over_nodes() -> None:
    docs = render(DEFAULT)
    agent_pdb = one(docs, "PodDisruptionBudget", "-agent")["spec"]
    assert agent_pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    op_pdb = one(docs, "PodDisruptionBudget", "-operator")["spec"]
    assert op_pdb["maxUnavailable"] == 1
    assert _matches(op_pdb["selector"], _pod(docs, "Deployment", "-operator")["metadata"][
        "labels"])
    agent = _pod(docs, "Deployment", "-agent")
    [spread] = agent["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert _matches(spread["labelSelector"], agent["metadata"]["labels"])
    # The user's own constraints replace the default; the operator's budget can be turned off.
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"a": "b"}}}
    own = render(DEFAULT, {"agent.topologySpreadConstraints": [zone],
                           "operator.pdb.enabled": False})
    assert _pod(own, "Deployment", "-agent")["spec"]["topologySpreadConstraints"] == [zone]
    assert [p["metadata"]["name"] for p in by_kind(own, "PodDisruptionBudget")] == [
        "t-agentchat-agent"]


def test_the_uninstall_hook_is_short_and_removed_even_when_it_fails() -> None:
    job = one(render(DEFAULT, {"operator.uninstallWaitSeconds": 45}), "Job", "-uninstall")
    policy = job["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
    assert set(policy) == {"before-hook-creation", "hook-succeeded", "hook-failed"}
    assert job["spec"]["activeDeadlineSeconds"] == 75
    assert job["spec"]["backoffLimit"] <= 1
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--wait") + 1] == "45"


def test_migrations_run_once_per_release_in_a_hook_job() -> None:
    docs = render(DEFAULT, {"migrations.lockTimeoutMs": 2000})
    job = one(docs, "Job", "-migrate")
    notes = job["metadata"]["annotations"]
    # The DSN is an existing Secret: before install, and before every upgrade.
    assert notes["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "hook-succeeded" in notes["helm.sh/hook-delete-policy"]
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["args"][:3] == ["migrate", "--lock-timeout-ms", "2000"]
    assert "--statement-timeout-ms" in c["args"]
    assert {"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {
        "name": "agentchat-db", "key": "database-url"}}} in c["env"]
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    env = one(docs, "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_MIGRATE_ON_START"] == "false"
    assert env["AGENTCHAT_SCHEMA_WAIT_S"] == "120"
    # The chart's own Secret exists only once the release does: after install.
    inline = one(render([], {"database.url": "postgresql://u:p@db/agentchat",
                             "identity.user.jwks.existingConfigMap": "j"}), "Job", "-migrate")
    assert inline["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    # Off: no Job, and every agent start migrates as before.
    off = render(DEFAULT, {"migrations.enabled": False})
    assert not [j for j in by_kind(off, "Job") if j["metadata"]["name"].endswith("-migrate")]
    assert "AGENTCHAT_MIGRATE_ON_START" not in one(off, "ConfigMap", "-env")["data"]


def _rules(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return list(policy["spec"]["egress"])


def _ports(rule: dict[str, Any]) -> set[tuple[int, str]]:
    return {(p["port"], p["protocol"]) for p in rule["ports"]}


def test_egress_opens_exactly_what_each_pod_calls() -> None:
    docs = render(EGRESS)
    labels = {suffix: _pod(docs, kind, suffix)["metadata"]["labels"] for kind, suffix in (
        ("Deployment", "-agent"), ("Deployment", "-operator"), ("Job", "-uninstall"),
        ("Job", "-migrate"))}
    policies = {p["metadata"]["name"]: p for p in by_kind(docs, "NetworkPolicy")
                if "Egress" in p["spec"]["policyTypes"]}
    selects = {name: {s for s, lab in labels.items() if _matches(p["spec"]["podSelector"], lab)}
               for name, p in policies.items()}
    assert selects == {"t-agentchat-agent-egress": {"-agent"},
                       "t-agentchat-operator-egress": {"-operator", "-uninstall"},
                       "t-agentchat-migrate-egress": {"-migrate"}}
    for policy in policies.values():
        assert _ports(_rules(policy)[0]) == {(53, "UDP"), (53, "TCP")}
    agent = _rules(policies["t-agentchat-agent-egress"])
    assert {"ipBlock": {"cidr": "10.20.0.0/16"}} in agent[1]["to"]  # the database
    assert _ports(agent[2]) == {(443, "TCP")} and _any_address(agent[2])  # the LLM
    assert _ports(agent[3]) == {(8080, "TCP")}  # ss-tools
    assert _ports(agent[4]) == {(587, "TCP")} and _any_address(agent[4])  # SMTP
    assert _ports(agent[5]) == {(443, "TCP")} and _any_address(agent[5])  # the webhook
    operator = _rules(policies["t-agentchat-operator-egress"])
    assert operator[1] == {"to": [{"ipBlock": {"cidr": "10.96.0.1/32"}},
                                  {"ipBlock": {"cidr": "172.18.0.2/32"}}],
                           "ports": [{"port": 6443, "protocol": "TCP"}]}
    migrate = policies["t-agentchat-migrate-egress"]
    # A hook like its Job, created before it: the Job runs before the release's objects exist.
    job = one(docs, "Job", "-migrate")["metadata"]["annotations"]
    assert migrate["metadata"]["annotations"]["helm.sh/hook"] == job["helm.sh/hook"]
    assert int(migrate["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["helm.sh/hook-weight"])
    # The offline planner calls no LLM, no notification configured: no rule for them. Off by
    # default.
    offline = render(EGRESS, {"llm.model": "offline", "approvals.webhook.enabled": False,
                              "approvals.email.smtpUrl": ""})
    assert len(_rules(one(offline, "NetworkPolicy", "-agent-egress"))) == 3
    assert not [p for p in by_kind(render(DEFAULT), "NetworkPolicy")
                if "Egress" in p["spec"]["policyTypes"]]


def test_egress_without_the_api_server_is_refused() -> None:
    with pytest.raises(HelmError, match=r"networkPolicy\.egress\.apiServerCidrs"):
        render(EGRESS, {"networkPolicy.egress.apiServerCidrs": []})


METADATA = {"0.0.0.0/0": {"169.254.0.0/16"}, "::/0": {"fd00:ec2::254/128"}}


def _any_address(rule: dict[str, Any]) -> bool:
    """The rule reaches any address (v4 and v6) but the excepted ones."""
    return {p.get("ipBlock", {}).get("cidr") for p in rule.get("to", [])} >= set(METADATA)


def _open_rules(docs: list[dict[str, Any]], api_server: list[str]) -> list[str]:
    """Egress rules that reach the cloud metadata or the API server: any rule without peers but
    DNS, and any 0.0.0.0/0 or ::/0 without both excepted."""
    found = []
    for policy in by_kind(docs, "NetworkPolicy"):
        for rule in policy["spec"].get("egress", []):
            name = f"{policy['metadata']['name']} {rule.get('ports')}"
            if not rule.get("to") and _ports(rule) != {(53, "UDP"), (53, "TCP")}:
                found.append(name)
            for peer in rule.get("to", []):
                cidr = peer.get("ipBlock", {}).get("cidr")
                if cidr in METADATA:
                    wanted = METADATA[cidr] | {c for c in api_server if (":" in c) == (
                        ":" in cidr)}
                    if not wanted <= set(peer["ipBlock"].get("except", [])):
                        found.append(name)
    return found


@pytest.mark.parametrize("sets", [
    {},
    # A peer of 0.0.0.0/0 given as such and an extra rule without peers: excepts added.
    {"networkPolicy.egress.llm.to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
     "networkPolicy.egress.extra": [{"ports": [{"port": 4318, "protocol": "TCP"}]}],
     "networkPolicy.egress.apiServerCidrs": ["10.96.0.1/32", "fd00:10:96::1/128"]},
    {"networkPolicy.egress.database.to": [], "operator.enabled": False},
], ids=["ci-egress", "given-any-and-extra", "operator-off"])
def test_egress_never_reaches_the_cloud_metadata_or_the_api_server(sets: dict[str, Any]) -> None:
    docs = render(EGRESS, sets)
    api = sets.get("networkPolicy.egress.apiServerCidrs", ["10.96.0.1/32", "172.18.0.2/32"])
    assert _open_rules(docs, api) == []
    agent = _rules(one(docs, "NetworkPolicy", "-agent-egress"))
    assert sum(_any_address(r) for r in agent) >= 3  # LLM, SMTP, webhook (and more)
    if "networkPolicy.egress.extra" in sets:
        [otlp] = [r for r in agent if _ports(r) == {(4318, "TCP")}]
        v6 = next(p for p in otlp["to"] if p["ipBlock"]["cidr"] == "::/0")
        assert v6["ipBlock"]["except"] == ["fd00:ec2::254/128", "fd00:10:96::1/128"]
    # Named peers are kept as given; nothing any-address means no API server value needed.
    named = {f"networkPolicy.egress.{t}.to": [{"ipBlock": {"cidr": "10.30.0.0/16"}}]
             for t in ("database", "llm", "ssTools", "smtp", "webhook")}
    docs = render(EGRESS, {**named, "operator.enabled": False,
                           "networkPolicy.egress.apiServerCidrs": []})
    assert not [r for r in _rules(one(docs, "NetworkPolicy", "-agent-egress"))
                if _any_address(r)]
    with pytest.raises(HelmError, match=r"networkPolicy\.egress\.apiServerCidrs: an egress rule"):
        render(EGRESS, {**sets, "operator.enabled": False,
                        "networkPolicy.egress.apiServerCidrs": []})


@pytest.mark.parametrize(("email", "ports"), [
    ({"smtpUrl": "smtp+starttls://smtp.example.com:2525"}, {2525}),
    ({"smtpUrl": "smtps://smtp.example.com"}, {465}),
    ({"smtpUrl": "smtp+starttls://smtp.example.com"}, {587}),
    ({"smtpUrl": "smtp://relay.mail"}, {25}),
    ({"existingSecret": "smtp"}, None),
    ({"existingSecret": "smtp", "port": [587]}, {587}),
    ({"smtpUrl": ""}, set()),
])
def test_smtp_is_reachable_when_email_is_configured(email: dict[str, Any],
                                                    ports: set[int] | None) -> None:
    sets: dict[str, Any] = {"approvals": {"email": {k: v for k, v in email.items()
                                                    if k != "port"}}}
    if "port" in email:
        sets["networkPolicy.egress.smtp.ports"] = email["port"]
    if ports is None:  # the URL is in a Secret the chart cannot read
        with pytest.raises(HelmError, match=r"networkPolicy\.egress\.smtp\.ports: the SMTP URL"):
            render(EGRESS, sets)
        return
    agent = _rules(one(render(EGRESS, sets), "NetworkPolicy", "-agent-egress"))
    smtp_ports = {25, 465, 587, 2525}
    assert {p for r in agent for p, _ in _ports(r) if p in smtp_ports} == ports
