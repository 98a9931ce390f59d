"""What the monitoring tests share: the metric names the chart's dashboard and alert rules
use, and the metric catalogue of the components (their registries).

No tests here. A query names a histogram through its `_bucket`/`_sum`/`_count` series and a
counter through `_total`; `series()` lists those exposition names per component, so a name in a
query is checked against what a component really serves.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from typing import Any

from prometheus_client import CollectorRegistry

from testkit.chart import CHART, ROOT

DASHBOARD = CHART / "files" / "monitoring" / "dashboard.json"
RULES_TEMPLATE = CHART / "templates" / "monitoring" / "prometheusrule.yaml"
METRIC = re.compile(r"\bagentchat_[a-z0-9_]+\b")
# Grafana's variables, replaced by something PromQL parses (the test's, not Grafana's values).
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "${datasource}": "prometheus",
                "$namespace": ".*"}


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels") or [])  # a collapsed row holds its panels
    return out


def dashboard_exprs(dash: dict[str, Any] | None = None) -> list[str]:
    """Every panel query with Grafana's variables replaced."""
    exprs = []
    for p in panels(dash or dashboard()):
        for t in p.get("targets") or []:
            expr = t["expr"]
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            exprs.append(expr)
    return exprs


def names_in(text: str) -> set[str]:
    """The series names a query or rule file mentions (recording rules' own names aside)."""
    return set(METRIC.findall(text))


def used_names() -> set[str]:
    """Every series name the dashboard and the alert rules (template text) use."""
    return names_in(DASHBOARD.read_text()) | names_in(RULES_TEMPLATE.read_text())


def series(registry: CollectorRegistry) -> set[str]:
    """The exposition names of a registry's metrics (counter `_total`, histogram `_bucket`...)."""
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count", "_created")}
        else:
            names.add(family.name)
    return names


def catalogue() -> dict[str, set[str]]:
    """component -> the series it serves, from the components' own registries."""
    from agentchat.agent.metrics import REGISTRY as AGENT
    from agentchat.operator.metrics import REGISTRY as OPERATOR
    from agentchat.policy.metrics import PolicyMetrics

    return {"agent": series(AGENT), "policy": series(PolicyMetrics().registry),
            "operator": series(OPERATOR)}


def exposed(text: str) -> set[str]:
    """The series names a /metrics page declares (`# TYPE` lines, so a labelled metric with no
    sample yet counts) plus every sample name on it."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind == "counter":
                names |= {name if name.endswith("_total") else name + "_total"}
            elif kind == "histogram":
                names |= {name + s for s in ("_bucket", "_sum", "_count")}
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@functools.cache
def promtool() -> str:
    """Debian's promtool, from tools/ensure_promtool.py."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "ensure_promtool.py")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"tools/ensure_promtool.py failed: {done.stderr[-2000:]}"
    return done.stdout.strip().splitlines()[-1]


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False)
