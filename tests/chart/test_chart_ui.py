"""The people's page in the chart (issue 19): off by default; `ui.enabled` turns it on in the
agent (AGENTCHAT_AGENT_UI_ENABLED) and routes `/api/agent/ui`; in production only on a host of
its own (`ui.ingress.host`), an Ingress carrying the auth proxy's annotations. Real helm 3.19;
every values set of ci/ is also linted and validated by test_chart.py."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.chart import CHART, HelmError, by_kind, one, render

UI_VALUES = CHART / "ci" / "ui-values.yaml"
PROD = {"database.existingSecret": "db", "identity.user.jwks.existingConfigMap": "jwks",
        "ingress.enabled": True, "ingress.host": "sstools.example.com"}


def _env(docs: list[dict[str, Any]]) -> dict[str, str]:
    return dict(one(docs, "ConfigMap", "-env")["data"])


def _paths(ingress: dict[str, Any]) -> list[str]:
    [rule] = ingress["spec"]["rules"]
    return [p["path"] for p in rule["http"]["paths"]]


def test_off_by_default() -> None:
    docs = render(sets=PROD)
    assert _env(docs)["AGENTCHAT_AGENT_UI_ENABLED"] == "false"
    # The built-in Gradio page too (issue 31): a value turns it on, the dev profile does.
    assert _env(docs)["AGENTCHAT_AGENT_PAGE_ENABLED"] == "false"
    assert _env(render(sets={**PROD, "ui.gradioPage.enabled": True}))[
        "AGENTCHAT_AGENT_PAGE_ENABLED"] == "true"
    assert _env(render([CHART / "values-dev.yaml"]))["AGENTCHAT_AGENT_PAGE_ENABLED"] == "true"
    [ingress] = by_kind(docs, "Ingress")
    assert "/api/agent/ui" not in _paths(ingress)


def test_dev_profile_serves_the_page_on_the_main_ingress() -> None:
    docs = render([CHART / "values-dev.yaml"], {"ingress.enabled": True,
                                                "ingress.host": "agentchat.localtest.me"})
    assert _env(docs)["AGENTCHAT_AGENT_UI_ENABLED"] == "true"
    [ingress] = by_kind(docs, "Ingress")
    assert _paths(ingress)[-1] == "/api/agent/ui"


def test_production_page_has_its_own_ingress_behind_the_auth_proxy() -> None:
    docs = render([UI_VALUES])
    assert _env(docs)["AGENTCHAT_AGENT_UI_ENABLED"] == "true"
    main = one(docs, "Ingress", "t-agentchat")
    ui = one(docs, "Ingress", "-ui")
    # The ss-tools frontend's host is untouched: it sends its own tokens, no auth proxy there.
    assert "/api/agent/ui" not in _paths(main)
    assert not any("auth-" in k for k in main["metadata"]["annotations"])
    # People's host: the page and every API path it calls, all through the auth proxy.
    [rule] = ui["spec"]["rules"]
    assert rule["host"] == "agentchat.example.com"
    assert _paths(ui) == ["/api/agent/ui", "/api/agent/gradio", "/api/agent", "/api/assistant"]
    notes = ui["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/auth-response-headers"] == "Authorization"
    assert notes["nginx.ingress.kubernetes.io/auth-url"].endswith("/oauth2/auth")
    # Gradio streams through it like through the main one.
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert ui["spec"]["tls"] == [{"hosts": ["agentchat.example.com"],
                                  "secretName": "agentchat-tls"}]
    assert ui["metadata"]["labels"]["app.kubernetes.io/component"] == "ui"


def test_production_refuses_the_page_without_a_host_of_its_own() -> None:
    with pytest.raises(HelmError, match=r"ui\.ingress\.host"):
        render(sets={**PROD, "ui.enabled": True})


def test_a_page_host_without_the_page_is_refused() -> None:
    with pytest.raises(HelmError, match=r"ui\.enabled is false"):
        render(sets={**PROD, "ui.ingress.host": "agentchat.example.com"})


def test_schema_refuses_unknown_ui_values() -> None:
    with pytest.raises(HelmError, match="csp"):
        render(sets={**PROD, "ui.csp": "default-src *"})
    with pytest.raises(HelmError, match="enabled"):
        render(sets={**PROD, "ui.enabled": "yes"})
