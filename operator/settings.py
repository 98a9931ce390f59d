"""Operator settings: AGENTCHAT_OPERATOR_<NAME> (the convention of agentchat/settings.py), on top of
the shared ones; operator/README.md lists them."""

from __future__ import annotations

from pydantic import Field

from agentchat.settings import SharedSettings


class OperatorSettings(SharedSettings):
    # How often the timers look at each AgentChat; every action is due-checked, so a short
    # tick only costs a status read.
    operator_tick_s: float = Field(default=10.0, gt=0)
    operator_liveness_host: str = "0.0.0.0"
    operator_liveness_port: int = 8080
    # Empty: cluster-wide (-A). Otherwise the namespaces to serve.
    operator_namespaces: list[str] = Field(default_factory=list)
    operator_standalone: bool = False
    # Retries after a failure: base * 2**retry, capped.
    operator_backoff_base_s: float = Field(default=2.0, gt=0)
    operator_backoff_max_s: float = Field(default=300.0, gt=0)
    # Seconds to wait for the database before a prune reports STORAGE_UNAVAILABLE.
    operator_database_timeout_s: float = Field(default=5.0, gt=0)

    # The pruner sleeps this many times the duration of each unit of work (see pruning.py).
    operator_prune_pause_ratio: float = Field(default=1.0, ge=0)
    # kopf's wait for its own patches to come back (0 for an API without resourceVersions).
    operator_consistency_timeout_s: float = Field(default=5.0, ge=0)

    def backoff(self, retry: int) -> float:
        return float(min(self.operator_backoff_base_s * 2 ** max(retry, 0),
                         self.operator_backoff_max_s))
