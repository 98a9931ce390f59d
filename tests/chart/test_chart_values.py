"""Bad values are refused with a message naming the value: by values.schema.json (helm checks it
on lint, template, install and upgrade) or by the chart's cross-field checks (validate.yaml)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from testkit.chart import CHART, HelmError, lint, matrix, render

DEFAULT = matrix()["default"]


@pytest.mark.parametrize(("sets", "message"), [
    ({"agent.replicaCount": "two"}, r"/agent/replicaCount': got string, want integer"),
    ({"agent.replicaCount": 0}, r"/agent/replicaCount': minimum"),
    ({"agent.replicsCount": 3}, r"additional properties 'replicsCount' not allowed"),
    ({"bogus": 1}, r"additional properties 'bogus' not allowed"),
    ({"ingress.enabled": True}, r"/ingress/host'"),
    ({"ingress.enabled": True, "ingress.host": "Not A Host"}, r"/ingress/host'"),
    ({"ingress.enabled": True, "ingress.host": "a.example", "ingress.tls.enabled": True},
     r"/ingress/tls/secretName'"),
    ({"mode": "staging"}, r"/mode'"),
    ({"sidecar.native": "yes"}, r"/sidecar/native': got string, want boolean"),
    ({"serviceToken.source": "vault"}, r"/serviceToken/source'"),
    ({"database.url": "mysql://x"}, r"/database/url'"),
    ({"hpa.targetCPUUtilizationPercentage": 150}, r"/hpa/targetCPUUtilizationPercentage'"),
    ({"extraConfig.DATABASE_URL": "x"}, r"'DATABASE_URL' does not match pattern '\^AGENTCHAT_"),
    ({"agentChat.spec.serviceToken.lifetimeSecond": 60}, r"'lifetimeSecond' not allowed"),
    ({"agent.allowedOrigins": ["https://ss.example.com/app"]}, r"/agent/allowedOrigins/0'"),
])
def test_schema_refuses_bad_values(sets: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError) as refused:
        render(DEFAULT, sets)
    assert "values don't meet the specifications of the schema" in str(refused.value)
    assert re.search(message, str(refused.value)), str(refused.value)
    # lint says the same, so CI catches it before an install does.
    with pytest.raises(HelmError, match="schema"):
        lint(DEFAULT, sets)


@pytest.mark.parametrize(("files", "sets", "message"), [
    ([], {}, "production needs database.existingSecret"),
    ([], {"database.existingSecret": "db"}, "production needs ss-tools' public keys"),
    (DEFAULT, {"sandbox.enabled": True}, "for mode: dev only"),
    (DEFAULT, {"serviceToken.source": "endpoint"}, "serviceToken.endpoint.url"),
    ([CHART / "values-dev.yaml"], {"postgresql.password": ""}, "postgresql.password is required"),
    (DEFAULT, {"policy.existingConfigMap": "p", "policy.rules": "g"},
     "either policy.existingConfigMap or the inline"),
    (DEFAULT, {"catalog.existingConfigMap": "c", "catalog.inline": "version: 1"},
     "either catalog.existingConfigMap or catalog.inline"),
    (DEFAULT, {"approvals.webhook.enabled": True},
     "approvals.webhook.enabled needs approvals.webhook.existingSecret"),
])
def test_chart_refuses_unsafe_combinations(files: list[Path], sets: dict[str, Any],
                                           message: str) -> None:
    with pytest.raises(HelmError) as refused:
        render(files, sets)
    assert message in str(refused.value)


def test_every_default_value_is_in_the_schema_and_documented() -> None:
    """values.yaml, values.schema.json and the `## @param` comments describe the same keys."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(values, schema)
    documented = set(re.findall(r"^\s*## @param ([\w.]+)", (CHART / "values.yaml").read_text(),
                                re.M))
    units, every_key = _documented_units(values, schema, documented)
    assert units - documented == set(), "values without a ## @param comment"
    assert documented - every_key == set(), "## @param comments naming no value"


def _documented_units(values: dict[str, Any], schema: dict[str, Any], documented: set[str],
                      prefix: str = "") -> tuple[set[str], set[str]]:
    """A documented key is one unit (resources, probes, spec); an undocumented object whose schema
    lists its properties is a section whose keys must be documented one by one."""
    units: set[str] = set()
    every_key: set[str] = set()
    for key, value in values.items():
        sub = schema.get("properties", {}).get(key, {})
        name = f"{prefix}{key}"
        every_key.add(name)
        if name not in documented and isinstance(value, dict) and "properties" in sub:
            inner_units, inner_keys = _documented_units(value, sub, documented, name + ".")
            units |= inner_units
            every_key |= inner_keys
        else:
            units.add(name)
    return units, every_key


def test_every_schema_object_is_closed() -> None:
    """additionalProperties: false on every object with listed properties: a typo is an error,
    not a silently ignored value."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node and node.get("additionalProperties") is not False:
            open_objects.append(path)
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]")

    walk(schema, "$")
    # matchLabels selectors are closed too; "global" is helm's, passed by parent charts.
    assert open_objects == []


def test_values_dev_passes_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path in [CHART / "values-dev.yaml", *(CHART / "ci").glob("*-values.yaml")]:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_approval_notifications_are_configured_from_values_and_existing_secrets() -> None:
    """The webhook's URL and key and the SMTP URL come from existing Secrets (secretKeyRef),
    never a ConfigMap; the rest from the env ConfigMap."""
    from testkit.chart import one

    docs = render(DEFAULT, {
        "approvals.publicUrl": "https://ss.example.com",
        "approvals.webhook.enabled": True, "approvals.webhook.existingSecret": "approvals",
        "approvals.email.existingSecret": "smtp", "approvals.email.from": "ac@example.com",
        "approvals.email.to": {"prod": ["ops@example.com"]}})
    env = one(docs, "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_AGENT_PUBLIC_URL"] == "https://ss.example.com"
    assert json.loads(env["AGENTCHAT_AGENT_APPROVAL_EMAIL_TO"]) == {"prod": ["ops@example.com"]}
    assert env["AGENTCHAT_AGENT_SMTP_FROM"] == "ac@example.com"
    for name in ("AGENTCHAT_AGENT_SMTP_URL", "AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL"):
        assert name not in env  # from the Secret, never a ConfigMap
    agent = next(c for c in one(docs, "Deployment", "-agent")["spec"]["template"]["spec"][
        "containers"] if c["name"] == "agent")
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in agent["env"] if "valueFrom" in e}
    assert refs["AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL"] == {"name": "approvals",
                                                             "key": "webhook-url"}
    assert refs["AGENTCHAT_AGENT_APPROVAL_WEBHOOK_SECRET"] == {"name": "approvals",
                                                                "key": "webhook-secret"}
    assert refs["AGENTCHAT_AGENT_SMTP_URL"] == {"name": "smtp", "key": "smtp-url"}
    # An SMTP relay without credentials may stay a plain value.
    relay = one(render(DEFAULT, {"approvals.email.smtpUrl": "smtp+starttls://relay:587"}),
                "ConfigMap", "-env")["data"]
    assert relay["AGENTCHAT_AGENT_SMTP_URL"] == "smtp+starttls://relay:587"


SECRET = "xoxb-T0KEN-hunter2"


def test_allowed_origins_reach_the_agent_as_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """`agent.allowedOrigins` becomes the env the agent's settings read (cross-site writes from
    those origins pass; docs/protocol.md §9); none set renders an empty list."""
    from agentchat.agent.settings import AgentSettings
    from testkit.chart import one

    def env(sets: dict[str, Any]) -> dict[str, str]:
        return dict(one(render(DEFAULT, sets), "ConfigMap", "-env")["data"])

    assert json.loads(env({})["AGENTCHAT_AGENT_ALLOWED_ORIGINS"]) == []
    rendered = env({"agent.allowedOrigins": ["https://ss.example.com", "https://b.example"]})
    monkeypatch.setenv("AGENTCHAT_AGENT_ALLOWED_ORIGINS",
                       rendered["AGENTCHAT_AGENT_ALLOWED_ORIGINS"])
    assert AgentSettings(mode="dev").allowed_origins == ["https://ss.example.com",
                                                         "https://b.example"]


@pytest.mark.parametrize(("sets", "message"), [
    ({"approvals.webhook.url": f"https://hooks.slack.com/services/T0/B0/{SECRET}"},
     "approvals.webhook.url is no longer read (chart 0.4)"),
    ({"approvals.email.smtpUrl": f"smtp+starttls://bot:{SECRET}@smtp.example.com:587"},
     "approvals.email.smtpUrl carries credentials"),
    # Also beside an existing Secret: the password would still sit in the release's values.
    ({"approvals.email.smtpUrl": f"smtps://bot:{SECRET}@smtp.example.com",
      "approvals.email.existingSecret": "smtp"}, "approvals.email.smtpUrl carries credentials"),
    ({"extraConfig.AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL": f"https://hooks.example/{SECRET}"},
     "extraConfig.AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL: a secret never goes in the ConfigMap"),
    ({"extraConfig.AGENTCHAT_AGENT_SMTP_URL": f"smtp://u:{SECRET}@h"},
     "extraConfig.AGENTCHAT_AGENT_SMTP_URL: a secret never goes in the ConfigMap"),
])
def test_approval_secrets_in_plain_values_are_refused_without_printing_them(
        sets: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError) as refused:
        render(DEFAULT, sets)
    assert message in str(refused.value)
    assert SECRET not in str(refused.value)  # CI logs keep no credential
