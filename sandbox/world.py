"""The sandbox's mutable state: the seeded data plus asynchronous tasks that advance with time.

State is process-local and in memory (a stand-in, never for production); `World.reset()` re-seeds
it. A task is `queued` for one step, `running` for the next, then `succeeded`, and its effect
(a deploy's new version, a migration's copy) lands when it succeeds, observed lazily on every
request through `advance()`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from agentchat.sandbox import data


@dataclass
class Task:
    task_id: str
    kind: str  # "deploy" | "migration"
    env_id: str
    created_at: str
    created_mono: float
    params: dict[str, Any] = field(default_factory=dict)
    # Seeded tasks are born finished; live ones derive their status from the clock.
    final_status: str | None = None
    error: str | None = None
    result: dict[str, Any] | None = None

    def status(self, now: float, step_s: float) -> str:
        if self.final_status is not None:
            return self.final_status
        elapsed = now - self.created_mono
        if elapsed < step_s:
            return "queued"
        if elapsed < 2 * step_s:
            return "running"
        return "succeeded"

    def to_dict(self, now: float, step_s: float) -> dict[str, Any]:
        status = self.status(now, step_s)
        progress = {"queued": 0, "running": 50}.get(status, 100)
        return {"task_id": self.task_id, "kind": self.kind, "env_id": self.env_id,
                "status": status, "progress": progress, "created_at": self.created_at,
                "params": self.params, "result": self.result, "error": self.error}


class World:
    """Everything the sandbox API reads and changes."""

    def __init__(self, task_step_s: float = 1.0) -> None:
        self.task_step_s = task_step_s
        self.reset()

    def reset(self) -> None:
        now = data.now_utc()
        self.dashboards = data.seed_dashboards()
        self.databases = data.seed_databases()
        self.datasets = data.seed_datasets()
        self.maintenance = data.seed_maintenance(now)
        self.migrations, seeded_tasks = data.seed_migrations(now)
        self.tasks: dict[str, Task] = {}
        for t in seeded_tasks:
            self.tasks[t["task_id"]] = Task(
                task_id=t["task_id"], kind=t["kind"], env_id=t["env_id"],
                created_at=t["created_at"], created_mono=0.0, final_status=t["status"],
                error=t["error"], params={"migration_id": t["migration_id"]},
            )

    # -- asynchronous tasks ------------------------------------------------------------------

    def new_task(self, kind: str, env_id: str, params: dict[str, Any]) -> Task:
        task = Task(task_id="task-" + secrets.token_hex(8), kind=kind, env_id=env_id,
                    created_at=data.iso(data.now_utc()), created_mono=time.monotonic(),
                    params=params)
        self.tasks[task.task_id] = task
        return task

    def advance(self) -> None:
        """Apply the effect of every task that has reached `succeeded` since the last look."""
        now = time.monotonic()
        for task in self.tasks.values():
            if task.final_status is None and task.status(now, self.task_step_s) == "succeeded":
                self._finish(task)

    def task_view(self, task: Task) -> dict[str, Any]:
        return task.to_dict(time.monotonic(), self.task_step_s)

    def _finish(self, task: Task) -> None:
        p = task.params
        if task.kind == "deploy":
            dash = self.dashboards[p["dashboard_id"]]
            dash["envs"][task.env_id] = {
                "version": p["version"],
                "health": {"status": "healthy", "errors_24h": 0, "p95_latency_ms": 400,
                           "data_freshness_min": 5},
            }
            task.result = {"dashboard_id": dash["id"], "env_id": task.env_id,
                           "version": p["version"]}
            task.final_status = "succeeded"
            return
        mig = self.migrations[p["migration_id"]]
        source = self.dashboards[mig["dashboard_id"]]["envs"].get(mig["source_env"])
        if source is None:
            # Deleted from the source while queued: the migration fails, as it would upstream.
            task.final_status = mig["status"] = "failed"
            task.error = f"dashboard {mig['dashboard_id']} is gone from {mig['source_env']}"
            return
        self.dashboards[mig["dashboard_id"]]["envs"][mig["target_env"]] = {
            "version": source["version"], "health": dict(source["health"]),
        }
        task.final_status = mig["status"] = "succeeded"
        task.result = {"dashboard_id": mig["dashboard_id"], "env_id": mig["target_env"],
                       "version": source["version"]}

    # -- helpers the operations share ---------------------------------------------------------

    def active_maintenance(self, env_id: str) -> dict[str, Any] | None:
        return next((e for e in self.maintenance.values()
                     if e["env_id"] == env_id and e["status"] == "active"), None)

    def next_id(self, table: dict[int, Any]) -> int:
        return max(table, default=0) + 1
