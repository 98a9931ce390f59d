"""The MCP endpoint in the chart (docs/protocol.md §12): on by default, its audience, the token
exchange and its client secret from values, the ingress routing the metadata; what the chart
renders is what the agent's settings read."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.chart import HelmError, by_kind, containers, matrix, one, pod_specs, render

DEFAULT = matrix()["default"]
METADATA = "/.well-known/oauth-protected-resource/api/agent/mcp"
INGRESS = {"ingress.enabled": True, "ingress.host": "ss.example.com"}


def env(sets: dict[str, Any] | None = None) -> dict[str, str]:
    return dict(one(render(DEFAULT, sets or {}), "ConfigMap", "-env")["data"])


def agent_env(sets: dict[str, Any]) -> dict[str, Any]:
    [spec] = [s for name, s in pod_specs(render(DEFAULT, sets))
              if name.endswith("-agentchat-agent")]
    [agent] = [c for c in containers(spec) if c["name"] == "agent"]
    return {e["name"]: e for e in agent.get("env", [])}


def test_on_by_default_and_off_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentchat.agent.settings import AgentSettings

    assert env()["AGENTCHAT_AGENT_MCP_ENABLED"] == "true"
    off = env({"mcp.enabled": False, **INGRESS})
    assert off["AGENTCHAT_AGENT_MCP_ENABLED"] == "false"
    monkeypatch.setenv("AGENTCHAT_AGENT_MCP_ENABLED", off["AGENTCHAT_AGENT_MCP_ENABLED"])
    assert AgentSettings(mode="dev").mcp_enabled is False
    ingress = one(render(DEFAULT, {"mcp.enabled": False, **INGRESS}), "Ingress")
    assert METADATA not in [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]]


def test_the_ingress_routes_the_metadata_exactly() -> None:
    ingress = one(render(DEFAULT, INGRESS), "Ingress")
    [first, *_] = ingress["spec"]["rules"][0]["http"]["paths"]
    assert (first["path"], first["pathType"]) == (METADATA, "Exact")
    # The endpoint itself is under /api/agent, which the ingress routes already.
    assert "/api/agent" in [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]]


@pytest.mark.parametrize(("sets", "audience"), [
    ({}, None),  # no public URL, no ingress: the agent's listen address (dev)
    ({**INGRESS}, "http://ss.example.com/api/agent/mcp"),
    ({**INGRESS, "ingress.tls.enabled": True, "ingress.tls.secretName": "tls"},
     "https://ss.example.com/api/agent/mcp"),
    ({**INGRESS, "approvals.publicUrl": "https://ss.example.com"}, None),  # the agent derives
    ({**INGRESS, "mcp.audience": "https://mcp.example.com/api/agent/mcp"},
     "https://mcp.example.com/api/agent/mcp"),
])
def test_the_audience(sets: dict[str, Any], audience: str | None,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    from agentchat.agent.settings import AgentSettings

    rendered = env(sets)
    assert rendered.get("AGENTCHAT_AGENT_MCP_AUDIENCE") == audience
    for name in ("AGENTCHAT_AGENT_MCP_AUDIENCE", "AGENTCHAT_AGENT_PUBLIC_URL"):
        if name in rendered:
            monkeypatch.setenv(name, rendered[name])
    expected = audience or ("https://ss.example.com/api/agent/mcp" if "approvals.publicUrl"
                            in sets else "http://127.0.0.1:7860/api/agent/mcp")
    assert AgentSettings(mode="dev").mcp_resource == expected


def test_the_token_exchange_and_its_client_secret() -> None:
    url = "https://sso.example.com/realms/ss/protocol/openid-connect/token"
    assert env({"mcp.tokenExchange.url": url})["AGENTCHAT_AGENT_MCP_TOKEN_EXCHANGE_URL"] == url
    assert "AGENTCHAT_AGENT_MCP_TOKEN_EXCHANGE_URL" not in env()
    # The operator mints service tokens: the exchange's client secret comes from its Secret.
    assert "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET" not in agent_env({})
    secret = agent_env({"mcp.tokenExchange.existingSecret": "sso-client"})[
        "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET"]
    assert secret["valueFrom"]["secretKeyRef"] == {"name": "sso-client", "key": "client-secret"}
    # With the service-token endpoint, that client's secret serves both.
    both = agent_env({"serviceToken.source": "endpoint",
                      "serviceToken.endpoint.url": "https://ss.example.com/api/auth/st",
                      "serviceToken.endpoint.existingSecret": "st",
                      "mcp.tokenExchange.existingSecret": "sso-client"})
    assert both["AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"][
        "name"] == "st"


@pytest.mark.parametrize("sets", [{"mcp.audience": "ss.example.com"},
                                  {"mcp.tokenExchange.url": "sso.example.com/token"},
                                  {"mcp.enable": True}])
def test_bad_values_are_refused(sets: dict[str, Any]) -> None:
    with pytest.raises(HelmError):
        render(DEFAULT, sets)


def test_every_kind_still_renders_once() -> None:
    docs = render(DEFAULT, INGRESS)
    assert len(by_kind(docs, "Ingress")) == 1
