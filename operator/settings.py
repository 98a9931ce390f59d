"""Operator settings: AGENTCHAT_OPERATOR_<NAME>, and its tuning AGENTCHAT_OPERATOR_TUNING__<NAME>
(the convention of agentchat/settings.py), on top of the shared ones; operator/README.md lists
them."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentchat.settings import SharedSettings


class OperatorTuning(BaseModel):
    """The operator's own timing: what its tests change, and no deployment needs to."""

    # How often the timers look at each AgentChat; every action is due-checked, so a short
    # tick only costs a status read.
    tick_s: float = Field(default=10.0, gt=0)
    # Retries after a failure: base * 2**retry, capped.
    backoff_base_s: float = Field(default=2.0, gt=0)
    backoff_max_s: float = Field(default=300.0, gt=0)
    # Seconds to wait for the database before a prune reports STORAGE_UNAVAILABLE.
    database_timeout_s: float = Field(default=5.0, gt=0)
    # The pruner sleeps this many times the duration of each unit of work (see pruning.py).
    prune_pause_ratio: float = Field(default=1.0, ge=0)
    # kopf's wait for its own patches to come back (0 for an API without resourceVersions:
    # the tests' kmock).
    consistency_timeout_s: float = Field(default=5.0, ge=0)


class OperatorSettings(SharedSettings):
    operator_liveness_host: str = "0.0.0.0"
    operator_liveness_port: int = 8080
    # Prometheus /metrics (operator/metrics.py) on a port of its own: kopf's liveness server
    # serves /healthz only. 0: no metrics server.
    operator_metrics_host: str = "0.0.0.0"
    operator_metrics_port: int = Field(default=9090, ge=0, le=65535)
    # Empty: cluster-wide (-A). Otherwise the namespaces to serve.
    operator_namespaces: list[str] = Field(default_factory=list)
    operator_standalone: bool = False
    # kopf peering (not standalone): the KopfPeering object the replicas share, so one acts
    # and the others take over within the peering's lifetime when it dies. Empty: kopf's
    # "default". Each replica picks a random priority: equal priorities freeze kopf.
    operator_peering: str = ""
    # One AgentChat per operator: only resources labelled app.kubernetes.io/instance=<this>
    # (the chart's release), so two releases in one namespace never reconcile each other's.
    # Empty: every AgentChat in the namespaces served.
    operator_instance: str = ""
    # On stop, how long to watch for AgentChats of ours being deleted and release kopf's
    # finalizer on them (an uninstall without its hook deletes the AgentChat and the operator
    # together). 0: never.
    operator_release_on_stop_s: float = Field(default=3.0, ge=0)

    tuning: OperatorTuning = Field(default_factory=OperatorTuning)

    def backoff(self, retry: int) -> float:
        return float(min(self.tuning.backoff_base_s * 2 ** max(retry, 0),
                         self.tuning.backoff_max_s))
