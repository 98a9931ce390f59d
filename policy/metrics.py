"""Prometheus metrics of the sidecar, in a registry of its own (one per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .reload import ReloadStatus

# Decisions take microseconds; the buckets resolve the agent's 200 ms budget finely below 5 ms.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.2)


class PolicyMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("agentchat_policy_decisions_total",
                                 "Decisions by result and reason.", ["decision", "reason"],
                                 registry=r)
        self.latency = Histogram("agentchat_policy_check_seconds",
                                 "Time to answer one /v1/check (both tokens, decision, log).",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.reloads = Counter("agentchat_policy_reloads_total",
                               "Policy reload attempts by result (loaded, unchanged, failed).",
                               ["result"], registry=r)
        self.reload_failing = Gauge("agentchat_policy_reload_failing",
                                    "1 while the latest reload failed (the last good serves).",
                                    registry=r)
        self.revision = Gauge("agentchat_policy_revision_info",
                              "The serving policy revision (value 1).", ["revision"], registry=r)
        self.service_refused = Counter("agentchat_policy_service_token_refused_total",
                                       "Service tokens refused (401), by cause.", ["cause"],
                                       registry=r)
        self.token_cache = Counter("agentchat_policy_token_cache_total",
                                   "Token cache lookups by token kind and result.",
                                   ["kind", "result"], registry=r)
        self._children: dict[tuple[str, str], Counter] = {}
        self._revision: str | None = None

    def decided(self, decision: str, reason: str, seconds: float | None = None) -> None:
        child = self._children.get((decision, reason))
        if child is None:
            child = self._children[(decision, reason)] = self.decisions.labels(decision, reason)
        child.inc()
        if seconds is not None:
            self.latency.observe(seconds)

    def on_reload(self, status: ReloadStatus) -> None:
        self.reloads.labels(status.result).inc()
        self.reload_failing.set(1 if status.result == "failed" else 0)
        if status.revision != self._revision:
            if self._revision is not None:
                self.revision.remove(self._revision)
            if status.revision is not None:
                self.revision.labels(status.revision).set(1)
            self._revision = status.revision

    def render(self) -> bytes:
        return generate_latest(self.registry)
