"""Prometheus metrics of the agent (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
TURNS = Counter("agentchat_turns_total", "Turns by how they ended", ["status"],
                registry=REGISTRY)
EVENTS = Counter("agentchat_events_total", "Stream events sent, by type", ["type"],
                 registry=REGISTRY)
ACTIVE_TURNS = Gauge("agentchat_active_turns", "Turns running on this replica",
                     registry=REGISTRY)
FIRST_EVENT = Histogram("agentchat_first_event_seconds", "Submit to first event",
                        registry=REGISTRY,
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
