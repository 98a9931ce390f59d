"""The chart's monitoring (issue 20 item 4) through real helm and promtool.

The PrometheusRule as rendered passes `promtool check rules`, and its alerts fire on the series
that mean trouble and stay quiet on healthy ones (`promtool test rules`). The dashboard is
Grafana's current classic model, every panel query parses as PromQL (each written as a
recording rule for promtool) and names only series a component serves (its registry).
promtool is Debian's, from tools/ensure_promtool.py.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml

from testkit.chart import CHART, HelmError, by_kind, one, render
from testkit.monitoring import (
    catalogue,
    dashboard_exprs,
    names_in,
    panels,
    run_promtool,
)

MONITORING = [CHART / "ci" / "monitoring-values.yaml"]
# Grafana 12's classic dashboard model (what the Grafana sidecar provisions).
SCHEMA_VERSION = 42
NAMESPACE = "agentchat"


@functools.cache
def _docs() -> list[dict[str, Any]]:
    return render(MONITORING, namespace=NAMESPACE)


def _rules_file(tmp_path: Path) -> Path:
    rule = one(_docs(), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


def _alerts() -> dict[str, dict[str, Any]]:
    rule = one(_docs(), "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_rules_pass_promtool(tmp_path: Path) -> None:
    done = run_promtool("check", "rules", str(_rules_file(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(_alerts()) == {
        "AgentChatPolicySidecarUnavailable", "AgentChatTurnErrorRate",
        "AgentChatServiceTokenExpiring", "AgentChatServiceTokenRefused",
        "AgentChatCardsExpiringUnanswered", "AgentChatTimeToFirstTokenHigh",
        "AgentChatTokenRenewalOverdue", "AgentChatKeyRotationOverdue",
        "AgentChatOperatorFailing", "AgentChatOperatorMetricsAbsent", "AgentChatPruningFailing",
            "AgentChatRunTakeoversFailing", "AgentChatUpstreamToolQuarantined",
        "AgentChatUpstreamRefreshFailing"}


def test_alerts_fire_on_trouble_and_not_on_health(tmp_path: Path) -> None:
    """promtool's rule unit tests: 1 minute per sample, time() is the evaluation time."""
    rules = _rules_file(tmp_path)
    alerts = _alerts()

    def fired(name: str, summary: str, **labels: str) -> dict[str, Any]:
        # The summary is the template rendered for these series: it is checked as well.
        return {"exp_labels": labels, "exp_annotations": {
            "summary": summary, "description": alerts[name]["annotations"]["description"]}}

    ns = f'namespace="{NAMESPACE}"'
    res = f'{ns}, agentchat="{NAMESPACE}/t-agentchat"'
    tests = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # 10 checks a minute, 3 of them unavailable (30% > 5%).
            {"series": f'agentchat_agent_policy_decisions_total{{{ns}, outcome="allow"}}',
             "values": "0+7x20"},
            {"series": f'agentchat_agent_policy_decisions_total{{{ns}, outcome="unavailable"}}',
             "values": "0+3x20"},
            # The token was due for renewal at t=0 and is not renewed: overdue after 600 s.
            {"series": f"agentchat_operator_token_refresh_timestamp_seconds{{{res}}}",
             "values": "0x20"},
            # The keys pass succeeds every minute: nothing stalls.
            {"series": f'agentchat_operator_last_success_timestamp_seconds{{{res}, task="keys"}}',
             "values": "0+60x20"},
            # The next key change is an hour away all along.
            {"series": f"agentchat_operator_keys_next_transition_timestamp_seconds{{{res}}}",
             "values": "3600x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "AgentChatPolicySidecarUnavailable",
             "exp_alerts": []},  # not yet 5 minutes
            {"eval_time": "10m", "alertname": "AgentChatPolicySidecarUnavailable",
             "exp_alerts": [fired("AgentChatPolicySidecarUnavailable",
                                  "AgentChat: the policy sidecar does not answer (30% of checks)",
                                  severity="critical", namespace=NAMESPACE)]},
            {"eval_time": "5m", "alertname": "AgentChatTokenRenewalOverdue", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "AgentChatTokenRenewalOverdue",
             "exp_alerts": [fired("AgentChatTokenRenewalOverdue",
                                  f"AgentChat {NAMESPACE}/t-agentchat: the service token is "
                                  "past its renewal time", severity="critical",
                                  namespace=NAMESPACE, agentchat=f"{NAMESPACE}/t-agentchat")]},
            {"eval_time": "15m", "alertname": "AgentChatOperatorFailing", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "AgentChatKeyRotationOverdue", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "AgentChatOperatorMetricsAbsent",
             "exp_alerts": []},
        ],
    }, {
        # A second world: no operator metrics at all, pruning failing, slow first tokens (9 of
        # 10 between 5 and 10 s: p99 interpolates to 9.944 s),
        # turns failing with INTERNAL, cards expiring.
        "interval": "1m",
        "input_series": [
            {"series": f'agentchat_operator_prune_runs_total{{{res}, result="failed"}}',
             "values": "0+1x240"},
            {"series": f'agentchat_first_token_seconds_bucket{{{ns}, le="5"}}',
             "values": "0+1x60"},
            {"series": f'agentchat_first_token_seconds_bucket{{{ns}, le="10"}}',
             "values": "0+10x60"},
            {"series": f'agentchat_first_token_seconds_bucket{{{ns}, le="+Inf"}}',
             "values": "0+10x60"},
            {"series": f'agentchat_turns_total{{{ns}, status="completed", error_code=""}}',
             "values": "0+10x60"},
            {"series": f'agentchat_turns_total{{{ns}, status="failed", error_code="INTERNAL"}}',
             "values": "0+2x60"},
            {"series": f'agentchat_turns_total{{{ns}, status="failed", error_code="RATE_LIMITED"}}',
             "values": "0+50x60"},
            # One run no replica could take over, at minute 11 (RUN_LOST for its user).
            {"series": f'agentchat_run_takeovers_total{{{ns}, outcome="lost"}}',
             "values": "0x10 1x50"},
            {"series": f'agentchat_run_takeovers_total{{{ns}, outcome="resumed"}}',
             "values": "0+1x60"},
            {"series": f'agentchat_cards_total{{{ns}, outcome="shown"}}', "values": "0+1x120"},
            {"series": f'agentchat_cards_total{{{ns}, outcome="expired"}}',
             "values": "0+0.5x120"},
        ],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "AgentChatOperatorMetricsAbsent",
             "exp_alerts": [fired("AgentChatOperatorMetricsAbsent",
                                  f"AgentChat: no operator metrics in {NAMESPACE}",
                                  severity="warning", namespace=NAMESPACE, task="keys")]},
            {"eval_time": "60m", "alertname": "AgentChatPruningFailing",
             "exp_alerts": [fired("AgentChatPruningFailing",
                                  f"AgentChat {NAMESPACE}/t-agentchat: checkpoint pruning fails",
                                  severity="warning", namespace=NAMESPACE,
                                  agentchat=f"{NAMESPACE}/t-agentchat")]},
            {"eval_time": "30m", "alertname": "AgentChatTimeToFirstTokenHigh",
             "exp_alerts": [fired("AgentChatTimeToFirstTokenHigh",
                                  "AgentChat: TTFT p99 is 9.944s",
                                  severity="warning", namespace=NAMESPACE)]},
            {"eval_time": "9m", "alertname": "AgentChatRunTakeoversFailing", "exp_alerts": []},
            {"eval_time": "14m", "alertname": "AgentChatRunTakeoversFailing",
             "exp_alerts": [fired("AgentChatRunTakeoversFailing",
                                  "AgentChat: runs whose replica died could not be taken over",
                                  severity="warning", namespace=NAMESPACE)]},
            # 2 INTERNAL of 62 turns a minute: 3%, under 5%; RATE_LIMITED is the client's.
            {"eval_time": "30m", "alertname": "AgentChatTurnErrorRate", "exp_alerts": []},
            {"eval_time": "90m", "alertname": "AgentChatCardsExpiringUnanswered",
             "exp_alerts": [fired("AgentChatCardsExpiringUnanswered",
                                  "AgentChat: confirmation cards expire unanswered (50%)",
                                  severity="warning", namespace=NAMESPACE)]},
        ],
    }]}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = run_promtool("test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_is_grafanas_current_model_with_the_sidecar_label() -> None:
    cm = one(_docs(), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "AgentChat"}
    dash = json.loads(cm["data"]["agentchat.json"])
    assert dash["schemaVersion"] == SCHEMA_VERSION
    assert dash["uid"] == "agentchat" and dash["title"]
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    queried = [p for p in panels(dash) if p["type"] != "row"]
    assert queried and all(p.get("targets") for p in queried)
    for p in queried:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["refId"] and t["expr"] for t in p["targets"]), p["title"]
    # The label is configurable (another Grafana sidecar convention), and the default is off.
    other = render(MONITORING, {"monitoring.dashboard.labels": {"dashboards": "agentchat"}})
    assert one(other, "ConfigMap", "-dashboard")["metadata"]["labels"]["dashboards"] == \
        "agentchat"
    default = render([CHART / "ci" / "default-values.yaml"])
    assert not [d for d in default if d["metadata"]["name"].endswith("-dashboard")]
    assert not by_kind(default, "PrometheusRule")


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    exprs = dashboard_exprs(json.loads(one(_docs(), "ConfigMap", "-dashboard")["data"][
        "agentchat.json"]))
    assert len(exprs) >= 20
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"agentchat:dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = run_promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_and_rules_name_only_served_metrics() -> None:
    served = catalogue()
    everything = set().union(*served.values())
    dash = one(_docs(), "ConfigMap", "-dashboard")["data"]["agentchat.json"]
    rules = yaml.safe_dump(one(_docs(), "PrometheusRule")["spec"])
    for where, text in (("dashboard", dash), ("rules", rules)):
        unknown = names_in(text) - everything
        assert not unknown, f"{where} names metrics no component serves: {sorted(unknown)}"
    # The panels the issue asks for are there, by the series they read.
    used = names_in(dash)
    for name in ("agentchat_turns_total", "agentchat_first_token_seconds_bucket",
                 "agentchat_event_gap_seconds_bucket", "agentchat_cards_total",
                 "agentchat_card_answer_seconds_bucket", "agentchat_agent_policy_decisions_total",
                 "agentchat_agent_policy_seconds_bucket", "agentchat_tool_calls_total",
                 "agentchat_stream_joins_total", "agentchat_live_runs",
                 "agentchat_operator_rotations_total", "agentchat_operator_token_renewals_total",
                 "agentchat_operator_prune_runs_total", "agentchat_operator_failures_total",
                 "agentchat_operator_last_success_timestamp_seconds"):
        assert name in used, name


def test_operator_metrics_port_service_and_monitor() -> None:
    docs = _docs()
    deploy = one(docs, "Deployment", "-operator")
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AGENTCHAT_OPERATOR_METRICS_PORT"] == str(ports["metrics"]) == "9090"
    service = one(docs, "Service", "-operator-metrics")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = one(docs, "ServiceMonitor", "-operator")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    annotations = deploy["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9090"


def test_hpa_scales_on_cpu_and_optionally_live_runs() -> None:
    hpa = one(_docs(), "HorizontalPodAutoscaler")
    kinds = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert kinds["Resource"]["resource"]["name"] == "cpu"
    pods = kinds["Pods"]["pods"]
    assert pods["metric"]["name"] == "agentchat_live_runs"
    assert pods["target"] == {"type": "AverageValue", "averageValue": "40"}
    cpu_only = one(render(MONITORING, {"hpa.liveRuns.enabled": False}),
                   "HorizontalPodAutoscaler")
    assert [m["type"] for m in cpu_only["spec"]["metrics"]] == ["Resource"]


def test_tracing_switch_sets_otel_for_every_component() -> None:
    endpoint = "http://otel-collector.observability:4318"
    docs = render(MONITORING, {"tracing.enabled": True, "tracing.endpoint": endpoint,
                               "tracing.sampleRatio": 0.25})
    env_cm = one(docs, "ConfigMap", "-env")["data"]
    assert env_cm["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint
    assert env_cm["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert env_cm["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    # The agent, its sidecar and the operator all read that ConfigMap.
    name = one(docs, "ConfigMap", "-env")["metadata"]["name"]
    for suffix in ("-agent", "-operator"):
        spec = one(docs, "Deployment", suffix)["spec"]["template"]["spec"]
        containers = spec["containers"] + spec.get("initContainers", [])
        readers = [c["name"] for c in containers
                   if any(f.get("configMapRef", {}).get("name") == name
                          for f in c.get("envFrom", []))]
        assert readers, suffix
        if suffix == "-agent":
            assert {"agent", "policy"} <= set(readers), readers
    # Off by default: no OTEL_* anywhere.
    plain = render(MONITORING)
    assert not any("OTEL_" in json.dumps(d) for d in plain)


def test_tracing_without_an_endpoint_is_refused() -> None:
    try:
        render(MONITORING, {"tracing.enabled": True})
    except HelmError as e:
        assert "tracing.endpoint" in str(e)
    else:
        raise AssertionError("helm rendered tracing without an endpoint")
    try:
        render(MONITORING, {"tracing.enabled": True, "tracing.endpoint": "collector:4318"})
    except HelmError as e:
        assert "endpoint" in str(e)
    else:
        raise AssertionError("the schema let an endpoint without a scheme through")
