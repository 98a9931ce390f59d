"""The upstream MCP servers' alerts fire in the failure each names (promtool test rules):

- a pinned tool quarantined (its server changed it) fires, and stops once it is lifted;
- refreshes failing: the last successful read stops moving (reads fail), and a server no
  replica ever read since start (the timestamp series absent) both fire; a healthy server
  read every 3 minutes does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testkit.chart import CHART, one, render
from testkit.monitoring import run_promtool

NAMESPACE = "agentchat"
MONITORING = [CHART / "ci" / "monitoring-values.yaml"]


def test_upstream_alerts_fire_in_the_failure_they_name(tmp_path: Path) -> None:
    spec = one(render(MONITORING, namespace=NAMESPACE), "PrometheusRule")["spec"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(spec))
    described = {r["alert"]: r["annotations"]["description"]
                 for g in spec["groups"] for r in g["rules"]}

    def fired(name: str, summary: str, **labels: str) -> dict[str, Any]:
        return {"exp_labels": {"severity": "warning", "namespace": NAMESPACE, **labels},
                "exp_annotations": {"summary": summary, "description": described[name]}}

    ns = f'namespace="{NAMESPACE}"'
    tool = 'server="superset", tool="superset__list_dashboards"'
    read = "superset__get_dashboard_info"
    tests = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # Two replicas; the server changes list_dashboards at minute 10, back at 40.
            *({"series": f'agentchat_upstream_tool_quarantined{{{ns}, pod="{p}", {tool}}}',
               "values": "0x9 1x30 0x20"} for p in ("a-1", "a-2")),
            {"series": f'agentchat_upstream_tool_quarantined{{{ns}, pod="a-1", '
                       f'server="superset", tool="{read}"}}', "values": "0x60"},
            # superset: read every 3 minutes until minute 30, then every read fails.
            {"series": f'agentchat_upstream_tools{{{ns}, pod="a-1", server="superset"}}',
             "values": "2x90"},
            {"series": f'agentchat_upstream_refresh_timestamp_seconds{{{ns}, pod="a-1", '
                       'server="superset"}', "values": "0 0 0 180 180 180 360 360 360 540 540 "
                                                       "540 720 720 720 900 900 900 1080 1080 "
                                                       "1080 1260 1260 1260 1440 1440 1440 "
                                                       "1620 1620 1620 1800x60"},
            {"series": f'agentchat_upstream_refresh_failures_total{{{ns}, pod="a-1", '
                       'server="superset"}', "values": "0x30 1+1x60"},
            # jira: in the catalog, never read since the replicas started (unreachable).
            {"series": f'agentchat_upstream_tools{{{ns}, pod="a-1", server="jira"}}',
             "values": "1x90"},
            {"series": f'agentchat_upstream_refresh_failures_total{{{ns}, pod="a-1", '
                       'server="jira"}', "values": "1+1x90"},
        ],
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "AgentChatUpstreamToolQuarantined",
             "exp_alerts": []},
            {"eval_time": "12m", "alertname": "AgentChatUpstreamToolQuarantined",
             "exp_alerts": [fired("AgentChatUpstreamToolQuarantined",
                                  "AgentChat: upstream tool superset__list_dashboards is "
                                  "quarantined: superset no longer serves its pinned "
                                  "definition", server="superset",
                                  tool="superset__list_dashboards")]},
            {"eval_time": "45m", "alertname": "AgentChatUpstreamToolQuarantined",
             "exp_alerts": []},
            # jira never read: fires after its 5 minutes; superset read on time: quiet.
            {"eval_time": "6m", "alertname": "AgentChatUpstreamRefreshFailing",
             "exp_alerts": [fired("AgentChatUpstreamRefreshFailing",
                                  "AgentChat: the tool list of upstream jira has not been "
                                  "read for 15 minutes", server="jira")]},
            {"eval_time": "40m", "alertname": "AgentChatUpstreamRefreshFailing",
             "exp_alerts": [fired("AgentChatUpstreamRefreshFailing",
                                  "AgentChat: the tool list of upstream jira has not been "
                                  "read for 15 minutes", server="jira")]},
            # superset's last read at minute 30: stale from 45, firing from 50.
            {"eval_time": "52m", "alertname": "AgentChatUpstreamRefreshFailing",
             "exp_alerts": [
                 fired("AgentChatUpstreamRefreshFailing", "AgentChat: the tool list of "
                       "upstream jira has not been read for 15 minutes", server="jira"),
                 fired("AgentChatUpstreamRefreshFailing", "AgentChat: the tool list of "
                       "upstream superset has not been read for 15 minutes",
                       server="superset")]},
        ],
    }]}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = run_promtool("test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
