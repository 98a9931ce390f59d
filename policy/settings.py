"""Settings of the policy sidecar: AGENTCHAT_POLICY_<NAME>, and its tuning
AGENTCHAT_POLICY_TUNING__<NAME> (the convention of agentchat/settings.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from agentchat.settings import PACKAGE_DATA, ServerTuning, SharedSettings, env_name


class PolicyTuning(ServerTuning):
    """What the sidecar's benchmarks and tests change: AGENTCHAT_POLICY_TUNING__<NAME>
    (policy/README.md, "Tuning"). The token cache, the collector and the body limit are the
    shared ServerTuning's: unfrozen, a full collection of the sidecar's start-up heap paused
    every request ~55-65 ms under traced load (bench/observe_cost.py --gcstats); its first
    generation keeps Python's threshold (0), its young collections cost ~0.1 ms."""

    # Changes are grouped for this long before a reload (kubelet swaps several files at once).
    reload_debounce_ms: int = Field(default=200, ge=1)
    # Besides file events, the folder is re-checked this often (a missed event costs this much).
    reload_poll_s: float = Field(default=10.0, gt=0)
    max_batch: int = Field(default=100, ge=1)


class PolicySettings(SharedSettings):
    """The shared settings plus the sidecar's own; policy/README.md lists every variable."""

    # model.conf, policy.csv and tests/*.yaml (a ConfigMap mounted at /etc/agentchat/policy).
    policy_dir: Path = PACKAGE_DATA / "policy"
    # The policy tests' own folder (*.yaml; a second ConfigMap, mounted whole, so adding a
    # test changes only that ConfigMap, not the pod). Unset: `policy_dir/tests`.
    policy_tests_dir: Path | None = None
    # Loopback only: the agent in the same pod is the sidecar's one client.
    policy_host: str = "127.0.0.1"
    policy_port: int = 8181
    # Decision log: one JSON line per decision on stdout, and appended to this file when set.
    # Neither (stdout off without a file) is for benchmarks and tests only: dev mode.
    policy_decision_log_path: Path | None = None
    policy_decision_log_stdout: bool = True

    tuning: PolicyTuning = Field(default_factory=PolicyTuning)

    def dev_only_switches(self) -> list[str]:
        """No decision log at all (stdout off, no file): the benchmarks' and tests' quiet
        sidecar, never a deployment's."""
        if self.policy_decision_log_stdout or self.policy_decision_log_path is not None:
            return []
        return [f"{env_name(type(self), 'policy_decision_log_stdout')}=false without "
                f"{env_name(type(self), 'policy_decision_log_path')}"]
