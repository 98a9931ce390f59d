"""Other teams' MCP servers in the chart (docs/upstreams.md), through the real helm: each
server's Secret mounted where the agent reads credentials and in the agent container only,
each upstream's egress rule (its peers and ports) with its URLs named on the policy, the
chart's cross-checks against its own catalog, the schema's refusals, and the shipped Superset
section turned on as the docs say."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from agentchat.catalog import parse_catalog
from testkit.chart import CHART, HelmError, by_kind, lint, matrix, one, render
from testkit.shipped_superset import shipped_superset

UPSTREAMS = matrix()["upstreams"]
DEFAULT = matrix()["default"]
FOLDER = "/var/run/secrets/agentchat/upstreams"


def _agent(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(one(docs, "Deployment", "-agent")["spec"]["template"]["spec"])


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


def _ports(rule: dict[str, Any]) -> set[int]:
    return {p["port"] for p in rule["ports"]}


def test_each_servers_secret_is_mounted_for_the_agent_only() -> None:
    docs = render(UPSTREAMS)
    pod = _agent(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["upstream-superset"]["secret"] == {
        "secretName": "agentchat-upstream-superset", "defaultMode": 0o440}
    assert volumes["upstream-reports"]["secret"]["secretName"] == "agentchat-upstream-reports"
    [agent] = [c for c in pod["containers"] if c["name"] == "agent"]
    mounts = _mounts(agent)
    assert mounts["upstream-superset"] == f"{FOLDER}/superset"
    assert mounts["upstream-reports"] == f"{FOLDER}/reports"
    assert all(m["readOnly"] for m in agent["volumeMounts"] if m["name"].startswith("upstream"))
    # The sidecar (native or plain) never sees them.
    sidecars = [c for c in [*pod.get("initContainers", []), *pod["containers"]]
                if c["name"] == "policy"]
    assert sidecars and not [n for c in sidecars for n in _mounts(c) if "upstream" in n]
    assert one(docs, "ConfigMap", "-env")["data"]["AGENTCHAT_AGENT_UPSTREAM_SECRETS"] == FOLDER
    # Another folder moves the mounts and the agent's setting together.
    moved = render(UPSTREAMS, {"upstreams.secretsPath": "/etc/upstreams"})
    [agent] = [c for c in _agent(moved)["containers"] if c["name"] == "agent"]
    assert _mounts(agent)["upstream-superset"] == "/etc/upstreams/superset"
    assert one(moved, "ConfigMap", "-env")["data"][
        "AGENTCHAT_AGENT_UPSTREAM_SECRETS"] == "/etc/upstreams"
    # No upstream: no such volume; the agent's folder is set all the same.
    plain = render(DEFAULT)
    assert not [v for v in _agent(plain)["volumes"] if v["name"].startswith("upstream-")]
    assert one(plain, "ConfigMap", "-env")["data"]["AGENTCHAT_AGENT_UPSTREAM_SECRETS"] == FOLDER


def test_each_upstream_gets_its_egress_rule_and_its_urls_named() -> None:
    policy = one(render(UPSTREAMS), "NetworkPolicy", "-agent-egress")
    notes = policy["metadata"]["annotations"]
    assert notes["agentchat.sstools.io/upstream-superset"] == (
        "https://superset.ss-dev.example.com/mcp https://superset.example.com/mcp")
    assert notes["agentchat.sstools.io/upstream-reports"] == "http://reports.reports.svc:8080/mcp"
    rules = policy["spec"]["egress"]
    # Superset: its named peers and port, as given.
    assert {"to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}],
            "ports": [{"port": 443, "protocol": "TCP"}]} in rules
    # The reports server: its URL's port; no peers, so any address but the excepted ones.
    [reports] = [r for r in rules if _ports(r) == {8080}]
    v4 = next(p["ipBlock"] for p in reports["to"] if p["ipBlock"]["cidr"] == "0.0.0.0/0")
    assert {"169.254.0.0/16", "10.96.0.1/32"} <= set(v4["except"])
    # Ports from the URLs when none are given: each URL's own, else its scheme's.
    derived = one(render(UPSTREAMS, {"upstreams.servers.superset.egress.ports": [],
                                     "upstreams.servers.superset.urls": [
                                         "https://superset.ss-dev.example.com/mcp",
                                         "https://superset.example.com:8443/mcp"],
                                     "catalog.inline": _inline_with(
                                         "https://superset.example.com/mcp",
                                         "https://superset.example.com:8443/mcp")}),
                  "NetworkPolicy", "-agent-egress")
    assert {"to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}]
            } in derived["spec"]["egress"]
    # Egress off (the default): no policy, no annotation to keep in step.
    off = render(UPSTREAMS, {"networkPolicy.egress.enabled": False})
    assert not [p for p in by_kind(off, "NetworkPolicy") if "Egress" in p["spec"]["policyTypes"]]


def _inline_with(old: str, new: str) -> str:
    inline = yaml.safe_load((CHART / "ci" / "upstreams-values.yaml").read_text())["catalog"][
        "inline"]
    return str(inline).replace(f'"{old}"', f'"{new}"')


@pytest.mark.parametrize(("sets", "message"), [
    ({"upstreams.servers.superset.existingSecret": ""},
     "upstreams.servers.superset.existingSecret: the catalog's upstream superset authenticates "
     "with jwt; give the Secret holding its key private_key.pem"),
    ({"upstreams.servers.reports.existingSecret": ""},
     "upstreams.servers.reports.existingSecret: the catalog's upstream reports authenticates "
     "with bearer; give the Secret holding its key token"),
    ({"upstreams.servers.superset.urls": ["https://superset.ss-dev.example.com/mcp"]},
     "upstreams.servers.superset.urls: add https://superset.example.com/mcp (the catalog's "
     "upstreams.superset.url.prod)"),
    ({"upstreams.servers.superset.existingSecret": "s"},
     "upstreams.servers.reports: networkPolicy.egress.enabled needs the catalog's upstream "
     "reports there"),
    ({"upstreams.servers.other": {"urls": ["https://other.example.com/mcp"]}},
     "upstreams.servers.other: the catalog has no upstream other"),
    ({"catalog.inline": _inline_with("https://superset.example.com/mcp", "x").replace(
        "auth: {type: bearer}", "auth: {type: none}")},
     "catalog: upstream reports has auth.type none, which is for dev only"),
])
def test_the_chart_refuses_upstream_values_that_cannot_work(sets: dict[str, Any],
                                                            message: str) -> None:
    with pytest.raises(HelmError) as refused:
        if "reports there" in message:  # the ci values without the reports server
            ci = yaml.safe_load((CHART / "ci" / "upstreams-values.yaml").read_text())
            del ci["upstreams"]["servers"]["reports"]
            render(DEFAULT, {k: v for k, v in ci.items() if k != "upstreams"} | {
                "upstreams.servers.superset": ci["upstreams"]["servers"]["superset"]})
        else:
            render(UPSTREAMS, sets)
    assert message in str(refused.value)


def test_shipped_values_name_no_upstream_unknown_to_the_shipped_catalog() -> None:
    with pytest.raises(HelmError, match="the shipped catalog's Superset section is commented"):
        render(DEFAULT, {"upstreams.servers.superset": {
            "existingSecret": "s", "urls": ["https://superset.example.com/mcp"]}})
    # With a catalog the chart cannot read, the values are taken as they are.
    docs = render(DEFAULT, {"catalog.existingConfigMap": "our-catalog",
                            "upstreams.servers.superset": {
                                "existingSecret": "s",
                                "urls": ["https://superset.example.com/mcp"]}})
    assert "upstream-superset" in {v["name"] for v in _agent(docs)["volumes"]}


@pytest.mark.parametrize(("sets", "message"), [
    ({"upstreams.servers.Super_set": {"urls": ["https://s.example.com/mcp"]}},
     r"'Super_set' does not match pattern"),
    ({"upstreams.servers.superset.urls": ["ftp://superset.example.com/mcp"]},
     r"/upstreams/servers/superset/urls/0'"),
    ({"upstreams.servers.superset.urls": ["https://user:pw@superset.example.com/mcp"]},
     r"/upstreams/servers/superset/urls/0'"),
    ({"upstreams.servers.superset.urls": []}, r"/upstreams/servers/superset/urls'"),
    ({"upstreams.servers.superset.egress.ports": [0]},
     r"/upstreams/servers/superset/egress/ports/0'"),
    ({"upstreams.servers.superset.secret": "s"}, r"additional properties 'secret' not allowed"),
    ({"upstreams.servers.superset.existingSecret": "Not A Secret"},
     r"/upstreams/servers/superset/existingSecret'"),
    ({"upstreams.secretsPath": "relative/path"}, r"/upstreams/secretsPath'"),
])
def test_the_schema_refuses_bad_upstream_values(sets: dict[str, Any], message: str) -> None:
    import re

    with pytest.raises(HelmError) as refused:
        render(UPSTREAMS, sets)
    assert "values don't meet the specifications of the schema" in str(refused.value)
    assert re.search(message, str(refused.value)), str(refused.value)
    with pytest.raises(HelmError, match="schema"):
        lint(UPSTREAMS, sets)


def test_the_shipped_superset_section_turned_on_is_a_catalog_the_chart_deploys() -> None:
    """As docs/upstreams.md says: the reads and the upstream uncommented (execute_sql stays
    off), upstreams.servers.superset with its Secret and the catalog's URLs."""
    text = shipped_superset(["superset tools", "superset upstream"])
    catalog = parse_catalog(text.encode(), "catalog.yaml")
    superset = [t for t in catalog.tools if t.upstream is not None]
    assert len(superset) == 9 and all(t.risk == "read" for t in superset)
    urls = sorted(catalog.upstreams["superset"].url.values())
    docs = render(DEFAULT, {"catalog.inline": text,
                            "networkPolicy.egress.enabled": True,
                            "networkPolicy.egress.apiServerCidrs": ["10.96.0.1/32"],
                            "upstreams.servers.superset": {
                                "existingSecret": "agentchat-upstream-superset", "urls": urls,
                                "egress": {"to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}]}}})
    assert one(docs, "ConfigMap", "-catalog")["data"]["catalog.yaml"].rstrip() == text.rstrip()
    notes = one(docs, "NetworkPolicy", "-agent-egress")["metadata"]["annotations"]
    assert notes["agentchat.sstools.io/upstream-superset"] == " ".join(urls)
    # The shipped catalog as it is: Superset off, nothing to mount or open.
    plain = render(DEFAULT)
    assert "superset__" not in str(yaml.safe_load(
        one(plain, "ConfigMap", "-catalog")["data"]["catalog.yaml"]))
