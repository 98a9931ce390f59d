"""Prometheus metrics of the agent (served at /metrics).

One catalogue for the whole process, so the chart's dashboard and alert rules have one place to
read names from. Labels never carry user or conversation ids (cardinality): those belong in the
traces and the audit trail.
"""

from __future__ import annotations

from pathlib import Path

import jwt
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_SLOW = (1, 5, 15, 30, 60, 120, 180, 240, 300, 600)
# Time to first token: past every threshold an alert can use (the chart's ttftP99Seconds,
# 5 s by default; tests/chart/test_chart_alerts.py compares), so a p99 above it is measurable.
_TTFT = (*_FAST, 7.5, 10, 15, 20, 30, 60)

# ---- turns and the stream ----
TURNS = Counter("agentchat_turns_total", "Turns by how they ended, and the error code if any",
                ["status", "error_code"], registry=REGISTRY)
EVENTS = Counter("agentchat_events_total", "Stream events sent, by type", ["type"],
                 registry=REGISTRY)
ACTIVE_TURNS = Gauge("agentchat_active_turns", "Turns running on this replica",
                     registry=REGISTRY)
LIVE_RUNS = Gauge("agentchat_live_runs", "Streaming runs live on this replica (the scaling signal)",
                  registry=REGISTRY)
FIRST_EVENT = Histogram("agentchat_first_event_seconds", "Submit to first event",
                        registry=REGISTRY, buckets=_FAST)
FIRST_TOKEN = Histogram("agentchat_first_token_seconds", "Submit to the first answer token (TTFT)",
                        registry=REGISTRY, buckets=_TTFT)
EVENT_GAP = Histogram("agentchat_event_gap_seconds", "Time between two events of one run",
                      registry=REGISTRY, buckets=_FAST)
STREAM_JOINS = Counter("agentchat_stream_joins_total",
                       "Joins of a run (action: join), by outcome: ok or the error code",
                       ["outcome"], registry=REGISTRY)
SATURATED = Counter("agentchat_saturated_total", "Submits refused with AGENT_SATURATED",
                    registry=REGISTRY)
# A run taken over from a dead or draining replica (agent/chat/takeover.py): `resumed`, or
# `lost` (its attempts used up, or no replica could go on with it: RUN_LOST); and how long
# it went without an owner (its last heartbeat, or its release, to its claim).
TAKEOVERS = Counter("agentchat_run_takeovers_total",
                    "Runs another replica took over, by outcome: resumed or lost", ["outcome"],
                    registry=REGISTRY)
TAKEOVER_SECONDS = Histogram("agentchat_run_takeover_seconds",
                             "A taken-over run's time without an owner: its old owner's last "
                             "heartbeat (or release) to its claim", registry=REGISTRY,
                             buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 15, 20, 30, 60))

# ---- confirmation cards ----
CARDS = Counter("agentchat_cards_total",
                "Confirmation cards, by outcome: shown, confirmed, denied, expired",
                ["outcome"], registry=REGISTRY)
CARD_ANSWER = Histogram("agentchat_card_answer_seconds", "Card shown to answered",
                        registry=REGISTRY, buckets=_SLOW)

# ---- the policy sidecar, seen from the agent ----
POLICY_DECISIONS = Counter("agentchat_agent_policy_decisions_total",
                           "Policy answers the agent got, by outcome: allow, deny, confirm, "
                           "unavailable", ["outcome"], registry=REGISTRY)
SERVICE_TOKEN_REFUSED = Counter(
    "agentchat_agent_service_token_refused_total",
    "Policy checks the sidecar refused for the service token (401 after a re-read): no tool runs",
    registry=REGISTRY)
SERVICE_TOKEN_EXPIRY = Gauge(
    "agentchat_service_token_expiry_timestamp_seconds",
    "`exp` of the mounted service token, read at each scrape (0: missing or unreadable)",
    registry=REGISTRY)
POLICY_LATENCY = Histogram("agentchat_agent_policy_seconds", "Round trip of one policy check",
                           registry=REGISTRY, buckets=_FAST)

# ---- tool calls to ss-tools ----
TOOL_CALLS = Counter("agentchat_tool_calls_total",
                     "Tool calls, by tool and outcome: ok, error, timeout, refused",
                     ["tool", "outcome"], registry=REGISTRY)
TOOL_SECONDS = Histogram("agentchat_tool_call_seconds", "Duration of one tool call to ss-tools",
                         ["tool"], registry=REGISTRY, buckets=_FAST)


# ---- other teams' MCP servers: pinned tools (agent/gate/upstream_pins.py) ----
# Every replica reads the one quarantine table, so each exports the same value: alerts take
# the max. `tool` is the catalog's name, so the labels are bounded by the catalog.
UPSTREAM_QUARANTINED = Gauge("agentchat_upstream_tool_quarantined",
                             "1 while a catalog upstream tool is quarantined: its server's "
                             "definition no longer matches the pin (changed or gone)",
                             ["server", "tool"], registry=REGISTRY)
UPSTREAM_TOOLS = Gauge("agentchat_upstream_tools", "Catalog tools an upstream MCP server runs",
                       ["server"], registry=REGISTRY)
UPSTREAM_REFRESH_FAILURES = Counter("agentchat_upstream_refresh_failures_total",
                                    "Reads of an upstream's tools/list (one environment's URL) "
                                    "that failed: unreachable, an error, too slow",
                                    ["server"], registry=REGISTRY)
UPSTREAM_REFRESHED = Gauge("agentchat_upstream_refresh_timestamp_seconds",
                           "When this replica last read every URL of an upstream's tools/list "
                           "and compared its tools with their pins (absent: not since start)",
                           ["server"], registry=REGISTRY)


def token_file_expiry(path: Path) -> float:
    """`exp` of the JWT in `path` (no signature check: the sidecar verifies), 0 when the file is
    missing or holds no token with an `exp`: an alert on it then fires, as it should."""
    try:
        claims = jwt.decode(path.read_text().strip(), options={"verify_signature": False})
    except (OSError, UnicodeDecodeError, jwt.PyJWTError):
        return 0.0
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else 0.0


def watch_service_token(path: Path) -> None:
    """Export the token file's expiry, read when Prometheus scrapes: it is true whether or not
    the operator runs or any check is made."""
    SERVICE_TOKEN_EXPIRY.set_function(lambda: token_file_expiry(path))
