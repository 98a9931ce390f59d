"""Alerts that see an absent operator (issue 37 item 2).

- promtool: the operator is gone (its series stop); the agent's own token-expiry series makes
  the critical alert fire 15 minutes before the token expires, and a sidecar refusing the
  token fires the other.
- The first-token histogram has a bucket beyond every threshold a rule compares it with.
- End to end: an agent whose mounted token has expired serves the expiry and the refusals at
  /metrics, and counts the check as unavailable, not deny.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from agentchat.agent.metrics import FIRST_TOKEN
from agentchat.keys import ensure_ring, sign_service_token
from testkit.chart import CHART, one, render
from testkit.monitoring import run_promtool
from testkit.raw_chat import RawChat
from testkit.stack import running_stack
from testkit.support import create_database, drop_database

NAMESPACE = "agentchat"
MONITORING = [CHART / "ci" / "monitoring-values.yaml"]


def _rules(sets: dict[str, object] | None = None) -> dict[str, Any]:
    return dict(one(render(MONITORING, sets, namespace=NAMESPACE), "PrometheusRule")["spec"])


def _ttft_thresholds(spec: dict[str, Any]) -> list[float]:
    exprs = [r["expr"] for g in spec["groups"] for r in g["rules"]]
    return [float(t) for e in exprs for t in re.findall(
        r"agentchat_first_token_seconds_bucket.*?\)\)\)\s*>\s*([0-9.]+)", e, re.S)]


def test_first_token_buckets_reach_past_every_threshold() -> None:
    bounds = [b for b in FIRST_TOKEN._upper_bounds if b != float("inf")]
    thresholds = _ttft_thresholds(_rules())
    assert thresholds == [5.0], thresholds
    for t in thresholds:
        assert max(bounds) > t, f"no finite bucket above {t}: the quantile cannot exceed it"
    # Raised thresholds stay measurable too, up to 30 s.
    raised = _ttft_thresholds(_rules({"monitoring.prometheusRule.ttftP99Seconds": 30}))
    assert raised == [30.0] and max(bounds) > 30


def test_the_operator_gone_pages_before_the_token_expires(tmp_path: Path) -> None:
    spec = _rules()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(spec))
    ns = f'namespace="{NAMESPACE}"'
    res = f'{ns}, agentchat="{NAMESPACE}/t-agentchat"'
    expiry = 60 * 60  # the token expires at t = 60 min
    described = {r["alert"]: r["annotations"]["description"]
                 for g in spec["groups"] for r in g["rules"]}

    def page(name: str, summary: str) -> dict[str, Any]:
        return {"exp_labels": {"severity": "critical", "namespace": NAMESPACE},
                "exp_annotations": {"summary": summary, "description": described[name]}}

    tests = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # The operator runs for 10 minutes, then its series stop (no replica left).
            {"series": f'agentchat_operator_last_success_timestamp_seconds{{{res}, task="keys"}}',
             "values": "0+60x10"},
            {"series": f"agentchat_operator_token_refresh_timestamp_seconds{{{res}}}",
             "values": f"{expiry - 900}x10"},
            # The agent's own view of the mounted token, scraped all along.
            {"series": f'agentchat_service_token_expiry_timestamp_seconds{{{ns}, pod="a-1"}}',
             "values": f"{expiry}x90"},
            {"series": f'agentchat_service_token_expiry_timestamp_seconds{{{ns}, pod="a-2"}}',
             "values": f"{expiry}x90"},
            # After expiry the sidecar refuses it: 3 refusals a minute.
            {"series": f'agentchat_agent_service_token_refused_total{{{ns}, pod="a-1"}}',
             "values": "0x60 0+3x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "30m", "alertname": "AgentChatServiceTokenExpiring", "exp_alerts": []},
            # Within 15 minutes of expiry (45 min) plus `for: 1m`, before it expires.
            {"eval_time": "47m", "alertname": "AgentChatServiceTokenExpiring",
             "exp_alerts": [page("AgentChatServiceTokenExpiring",
                                 "AgentChat: the service token expires in 13m 0s")]},
            {"eval_time": "47m", "alertname": "AgentChatServiceTokenRefused", "exp_alerts": []},
            {"eval_time": "65m", "alertname": "AgentChatServiceTokenRefused",
             "exp_alerts": [page("AgentChatServiceTokenRefused",
                                 "AgentChat: the policy sidecar refuses the service token")]},
            # The operator's own alerts have nothing to evaluate: that is why the above exist.
            {"eval_time": "47m", "alertname": "AgentChatTokenRenewalOverdue", "exp_alerts": []},
        ],
    }]}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = run_promtool("test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def _sample(page: str, name: str, **labels: str) -> float | None:
    for line in page.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
                f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_an_expired_service_token_is_an_outage_on_the_agents_metrics(
        tmp_path: Path, pg_server: str, migrated_template: str) -> None:
    url = create_database(pg_server, template=migrated_template)
    data = tmp_path / "data"
    data.mkdir()
    from agentchat.settings import SharedSettings

    s = SharedSettings(data_dir=data, mode="dev")
    ring = ensure_ring(s.keys_dir, s.jwks_path)
    # Signed by the ring the sidecar trusts, but expired: what the agent holds when no
    # operator renewed its token.
    issued = time.time() - 7200
    token = sign_service_token(ring, issuer=s.service_issuer, audience=s.service_audience,
                               lifetime_s=600, now=issued)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    try:
        with running_stack(data, url, AGENTCHAT_AGENT_SERVICE_TOKEN_FILE=str(token_file)) as st:
            async def go() -> str:
                async with httpx.AsyncClient() as http:
                    out = await RawChat(st.agent.url, st.token("alice"), http).submit(
                        "покажи дашборд 42")
                    return str(out.kind)

            asyncio.run(go())
            page = httpx.get(st.agent.url + "/metrics", timeout=5).text
    finally:
        drop_database(pg_server, url)
    assert _sample(page, "agentchat_service_token_expiry_timestamp_seconds") == \
        pytest.approx(int(issued) + 600)
    assert (_sample(page, "agentchat_agent_service_token_refused_total") or 0) >= 1
    assert (_sample(page, "agentchat_agent_policy_decisions_total", outcome="unavailable")
            or 0) >= 1
    assert not _sample(page, "agentchat_agent_policy_decisions_total", outcome="deny")
