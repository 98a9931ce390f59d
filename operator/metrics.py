"""Prometheus metrics of the operator (kopf has none of its own), served on their own port.

    AGENTCHAT_OPERATOR_METRICS_PORT (9090; 0: off) -> GET /metrics

Every series carries `agentchat` (`namespace/name` of the AgentChat resource: one per
installation, so the cardinality is the number of installations served), never a user or
conversation id. Only the replica that acts (kopf peering) runs the timers, so only it has
samples; the alert rules take `max` over replicas. The `*_timestamp_seconds` gauges are unix
seconds, as Prometheus' own `time()`: an alert compares them with it.

Tasks (`task` label): `keys` is one whole pass of the rotate timer (JWKS, ring, token) and
`prune` one checkpoint pruning run that was due.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

log = logging.getLogger("agentchat.operator.metrics")

REGISTRY = CollectorRegistry()

ROTATIONS = Counter("agentchat_operator_rotations_total",
                    "Key ring changes by action: created (first key), published (a next key "
                    "appears in the JWKS), promoted (it signs), retired (a previous key leaves)",
                    ["agentchat", "action"], registry=REGISTRY)
TOKEN_RENEWALS = Counter("agentchat_operator_token_renewals_total",
                         "Service tokens minted (first, before expiry, after a rotation)",
                         ["agentchat"], registry=REGISTRY)
PRUNE_RUNS = Counter("agentchat_operator_prune_runs_total",
                     "Due pruning runs by result: ok, failed, busy (another pruner holds the "
                     "lock), not_configured (no database or schema not migrated)",
                     ["agentchat", "result"], registry=REGISTRY)
PRUNED_ROWS = Counter("agentchat_operator_pruned_rows_total",
                      "Checkpoint rows deleted (checkpoints, blobs, writes)", ["agentchat"],
                      registry=REGISTRY)
PRUNED_THREADS = Counter("agentchat_operator_pruned_threads_total",
                         "Threads pruned by action: deleted (past retention) or compacted "
                         "(idle: only the latest checkpoint kept)", ["agentchat", "action"],
                         registry=REGISTRY)
FAILURES = Counter("agentchat_operator_failures_total",
                   "Failed passes by task and reason (the condition's reason)",
                   ["agentchat", "task", "reason"], registry=REGISTRY)
LAST_SUCCESS = Gauge("agentchat_operator_last_success_timestamp_seconds",
                     "When the task last succeeded (unix seconds)", ["agentchat", "task"],
                     registry=REGISTRY)
TOKEN_EXPIRES = Gauge("agentchat_operator_token_expiry_timestamp_seconds",
                      "When the service token in the Secret expires (unix seconds)",
                      ["agentchat"], registry=REGISTRY)
TOKEN_REFRESH = Gauge("agentchat_operator_token_refresh_timestamp_seconds",
                      "When the service token is due for renewal (status.token.refreshAt)",
                      ["agentchat"], registry=REGISTRY)
NEXT_TRANSITION = Gauge("agentchat_operator_keys_next_transition_timestamp_seconds",
                        "When the key ring's next stage change is due "
                        "(status.keys.nextTransitionAt)", ["agentchat"], registry=REGISTRY)


# Each metric with its label names in order (remove() takes values in that order).
SERIES = ((ROTATIONS, ("agentchat", "action")), (TOKEN_RENEWALS, ("agentchat",)),
          (PRUNE_RUNS, ("agentchat", "result")), (PRUNED_ROWS, ("agentchat",)),
          (PRUNED_THREADS, ("agentchat", "action")),
          (FAILURES, ("agentchat", "task", "reason")), (LAST_SUCCESS, ("agentchat", "task")),
          (TOKEN_EXPIRES, ("agentchat",)), (TOKEN_REFRESH, ("agentchat",)),
          (NEXT_TRANSITION, ("agentchat",)))


def forget(agentchat: str) -> int:
    """Drop every series of a deleted AgentChat (`namespace/name`); how many were dropped.
    A deleted resource's token refresh time would otherwise stay in the past and keep
    AgentChatTokenRenewalOverdue firing for it."""
    dropped = 0
    for metric, names in SERIES:
        labelsets = {tuple(sample.labels[n] for n in names)
                     for family in metric.collect() for sample in family.samples
                     if sample.labels.get("agentchat") == agentchat}
        for values in labelsets:
            metric.remove(*values)
            dropped += 1
    return dropped


def resource(body: Any) -> str:
    meta = body["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def serve(host: str, port: int) -> Any:
    """Start the /metrics server in a thread of its own; None when the port is 0."""
    if not port:
        return None
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server
