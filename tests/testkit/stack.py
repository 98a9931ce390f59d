"""The whole system as real processes for end-to-end tests: sandbox, policy sidecar, agent.

One stack per test module that needs settings of its own; the default stack (tests/conftest.py
`stack`) is shared by the modules of a test process, since an agent costs ~2 s of CPU to
start even forked from the pre-imported template (testkit/forkserver.py). Tests isolate
themselves by opening new conversations and resetting the sandbox where they count its audit.

Everything runs with AGENTCHAT_MODE=dev (unset is production) and the agent's per-user limits
lifted (most tests run every turn as alice); tests/agent/test_safe_defaults.py sets them low.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from agentchat.identity import DEMO_USERS, DevUserIssuer
from agentchat.keys import ensure_ring
from agentchat.settings import PACKAGE_DATA, SharedSettings
from testkit.support import Service, create_database, drop_database, free_port, stop_all

CLIENT_SECRET = "stack-test-secret"
# An agent's start is its slowest (Gradio's apps, the tool index) on a loaded 2-core machine.
AGENT_START_S = 90.0


@dataclass
class Stack:
    data_dir: Path
    database_url: str
    agent_env: dict[str, str] = field(default_factory=dict)
    # Extra environment of the sidecar (e.g. OTEL_* for the trace tests).
    policy_env: dict[str, str] = field(default_factory=dict)
    catalog_path: Path | None = None
    sandbox: Service | None = None
    policy: Service | None = None
    agents: list[Service] = field(default_factory=list)

    @property
    def agent(self) -> Service:
        return self.agents[0]

    @property
    def gradio_url(self) -> str:
        return self.agent.url + "/api/agent/gradio/"

    def settings(self) -> SharedSettings:
        return SharedSettings(data_dir=self.data_dir, mode="dev")

    def token(self, user: str, roles: list[str] | None = None, **kw: object) -> str:
        return DevUserIssuer(self.settings()).mint(user, roles, **kw)  # type: ignore[arg-type]

    def tokens(self) -> dict[str, str]:
        return {u: self.token(u) for u in DEMO_USERS}

    def base_env(self) -> dict[str, str]:
        extra = {"AGENTCHAT_CATALOG_PATH": str(self.catalog_path)} if self.catalog_path else {}
        return {**extra, "AGENTCHAT_DATA_DIR": str(self.data_dir),
                "DATABASE_URL": self.database_url,
                "AGENTCHAT_MODE": "dev", "AGENTCHAT_SANDBOX_CLIENT_SECRET": CLIENT_SECRET,
                "AGENTCHAT_SANDBOX_TASK_STEP_S": "0.2"}

    def start_sandbox(self, *, wait: bool = True) -> Service:
        port = free_port()
        self.sandbox = Service(["sandbox", "--port", str(port)], env=self.base_env(), port=port,
                               log=self.data_dir / "sandbox.log").spawn()
        return self.sandbox.wait_ready() if wait else self.sandbox

    def self_approved_policy(self) -> Path:
        """The shipped policy without its approvals.yaml: every card is the requester's own
        (`self`), as the suite's card flows drive it; tests/system/test_approvals.py brings
        its own rules (issue 34)."""
        folder = self.data_dir / "policy-self"
        if not folder.exists():
            shutil.copytree(PACKAGE_DATA / "policy", folder,
                            ignore=shutil.ignore_patterns("approvals.yaml"))
        return folder

    def start_policy(self, port: int | None = None, *, wait: bool = True) -> Service:
        port = port or free_port()
        env = {**self.base_env(), "AGENTCHAT_POLICY_DECISION_LOG_STDOUT": "false",
               "AGENTCHAT_POLICY_DIR": str(self.self_approved_policy()), **self.policy_env}
        self.policy = Service(["policy", "serve", "--port", str(port)], env=env, port=port,
                              ready_path="/readyz", log=self.data_dir / "policy.log").spawn()
        return self.policy.wait_ready() if wait else self.policy

    def start_agent(self, *, wait: bool = True, **env: str) -> Service:
        """An agent on this stack's sandbox and sidecar (it needs neither to start: it reaches
        them per request), with `env` over the defaults below."""
        assert self.sandbox and self.policy
        port = free_port()
        full = {**self.base_env(),
                "AGENTCHAT_AGENT_SSTOOLS_URL": self.sandbox.url,
                "AGENTCHAT_AGENT_SERVICE_TOKEN_URL": self.sandbox.url + "/api/auth/service-token",
                "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": CLIENT_SECRET,
                "AGENTCHAT_AGENT_POLICY_URL": self.policy.url,
                # Generous on a loaded 2-core test machine; the fault tests set their own.
                "AGENTCHAT_AGENT_TUNING__POLICY_TIMEOUT_S": "2.0",
                # Lifted: the tests (and bench/) start many turns as one user.
                "AGENTCHAT_AGENT_TUNING__MAX_CONCURRENT_RUNS_PER_USER": "100000",
                "AGENTCHAT_AGENT_TUNING__MAX_SUBMITS_PER_MINUTE_PER_USER": "100000",
                # The upload quotas too (tests/system/test_upload_quota.py sets its own).
                "AGENTCHAT_AGENT_TUNING__UPLOADS_PER_MINUTE_PER_USER": "100000",
                "AGENTCHAT_AGENT_TUNING__UPLOAD_FILES_PER_USER": "100000",
                "AGENTCHAT_AGENT_TUNING__UPLOAD_BYTES_PER_USER": str(1 << 40),
                "AGENTCHAT_AGENT_UPLOAD_BYTES_PER_REPLICA": str(1 << 40),
                "AGENTCHAT_AGENT_TUNING__MAX_STREAMS_PER_USER": "100000",
                "AGENTCHAT_AGENT_TUNING__MAX_REST_WRITES_PER_MINUTE_PER_USER": "100000",
                **self.agent_env, **env}
        agent = Service(["serve", "--port", str(port)], env=full, port=port,
                        log=self.data_dir / f"agent-{len(self.agents)}.log").spawn()
        if wait:  # one that never gets ready is stopped and left out, as before
            agent.wait_ready(AGENT_START_S)
        self.agents.append(agent)  # not waited for: listed at once, so the stack stops it
        return agent

    def start_agents(self, *envs: dict[str, str]) -> list[Service]:
        """Several agents started side by side, each with its `env`: an agent spends seconds
        of CPU starting, and the test process's other services and the second worker often
        leave a core idle meanwhile."""
        spawned = [self.start_agent(wait=False, **env) for env in envs]
        return [agent.wait_ready(AGENT_START_S) for agent in spawned]

    def reset_sandbox(self) -> None:
        assert self.sandbox
        httpx.post(self.sandbox.url + "/api/sandbox/reset", timeout=5).raise_for_status()

    def fault(self, **fault: object) -> None:
        assert self.sandbox
        httpx.post(self.sandbox.url + "/api/sandbox/faults", json=fault,
                   timeout=5).raise_for_status()

    def audit(self, **filters: str) -> list[dict[str, object]]:
        assert self.sandbox
        svc = self.service_token()
        resp = httpx.get(self.sandbox.url + "/api/audit", params=filters, timeout=5,
                         headers={"Authorization": f"Bearer {svc}",
                                  "X-User-JWT": self.token("alice")})
        resp.raise_for_status()
        return list(resp.json()["items"])

    def service_token(self) -> str:
        assert self.sandbox
        resp = httpx.post(self.sandbox.url + "/api/auth/service-token", timeout=5,
                          json={"client_id": "agentchat-agent", "client_secret": CLIENT_SECRET})
        resp.raise_for_status()
        return str(resp.json()["access_token"])

    def stop(self) -> None:
        # The agents first (a draining agent may still call the sidecar and the sandbox).
        stop_all(self.agents)
        stop_all([self.policy, self.sandbox])

    def node_env(self) -> dict[str, str]:
        toks = self.tokens()
        return {**os.environ, "AGENT_URL": self.agent.url, "GRADIO_URL": self.gradio_url,
                "SANDBOX_URL": self.sandbox.url if self.sandbox else "",
                **{f"TOKEN_{u.upper()}": t for u, t in toks.items()}}


@contextlib.contextmanager
def running_stack(data_dir: Path, database_url: str, *, catalog_path: Path | None = None,
                  policy_env: dict[str, str] | None = None, **agent_env: str) -> Iterator[Stack]:
    data_dir.mkdir(parents=True, exist_ok=True)
    s = SharedSettings(data_dir=data_dir, mode="dev")
    ensure_ring(s.keys_dir, s.jwks_path)
    DevUserIssuer(s)
    stack = Stack(data_dir=data_dir, database_url=database_url, agent_env=dict(agent_env),
                  policy_env=dict(policy_env or {}), catalog_path=catalog_path)
    try:
        # Side by side: none of the three needs another to start.
        sandbox, policy = stack.start_sandbox(wait=False), stack.start_policy(wait=False)
        agent = stack.start_agent(wait=False)
        sandbox.wait_ready()
        policy.wait_ready()
        agent.wait_ready(AGENT_START_S)
        yield stack
    except Exception:
        for svc in [*stack.agents, stack.policy, stack.sandbox]:
            if svc is not None:
                print(f"--- {svc.args[0]} log ---\n{svc.log_tail()}")
        raise
    finally:
        stack.stop()


@contextlib.contextmanager
def stack_on_own_database(pg_server: str, template: str, tmp: Path,
                          **kwargs: object) -> Iterator[Stack]:
    """`running_stack` on a fresh database cloned from the migrated template, dropped after."""
    url = create_database(pg_server, template=template)
    try:
        with running_stack(tmp / "data", url, **kwargs) as s:  # type: ignore[arg-type]
            yield s
    finally:
        drop_database(pg_server, url)


def catalog_with_timeouts(tmp: Path, timeouts: dict[str, float]) -> Path:
    """The shipped catalog with some tools' timeouts shortened (the slow-API tests)."""
    data = yaml.safe_load((PACKAGE_DATA / "catalog.yaml").read_text())
    for tool in data["tools"]:
        if tool["name"] in timeouts:
            tool["timeout_s"] = timeouts[tool["name"]]
    path = tmp / "catalog.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path
