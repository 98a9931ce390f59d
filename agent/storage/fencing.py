"""Every side effect of a run is fenced by its epoch in PostgreSQL (docs/protocol.md §4,
"Takeover").

A run's turn makes its side effects from its own task (agent/chat/turn_task.py), which holds
the run's `RunFence` in `CURRENT` (LangGraph runs the nodes in copies of that context):

    ss-tools request   gate/tool_runtime.py asks PostgreSQL for the epoch before each attempt
    audit row          audit/store.py appends only `WHERE` the epoch is still the run's (OWNED)
    planned step       storage/turn_plans.py stores it only `WHERE` OWNED, before its write

A fence that says `fenced` (another replica's heartbeat or a drain said so here) refuses at
once, without a query. Anything done outside a run's task (a REST approval, a card's answer)
sees no fence and is written as before. The run's events, records and checkpoints have their
own fence (agent/chat/run_hub.py).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agentchat.agent.storage.db import Db
from agentchat.agent.storage.runs import epoch_of

# True unless the run's row holds another epoch: a run the writer has not stored yet is its
# creator's (nobody can take a run over before its row exists). `fence_run` NULL: no run.
OWNED = ("NOT EXISTS (SELECT 1 FROM runs WHERE id = %(fence_run)s"
         " AND epoch <> %(fence_epoch)s)")


class RunFenced(Exception):
    """The run belongs to another replica now (taken over, released at a drain, marked lost):
    its turn makes no side effect more here. A signal, not an AgentChatError, so that no
    `except AgentChatError` on its way turns it into an error (agentchat/errors.py, SIGNALS)."""


@dataclass(eq=False)
class RunFence:
    """One run's ownership as its turn's side effects see it; filled in by the run's hub
    when the run starts (agent/chat/run_hub.py), unbound (no `run_id`) until then."""

    run_id: str | None = None
    epoch: int = 0
    db: Db | None = None
    fenced: bool = False
    # A run that goes on with a turn an earlier attempt began (a takeover): its model
    # steps are looked up in turn_plans before the model is asked (agent/graph/plans.py).
    replay: bool = False

    def check(self) -> None:
        """Raise RunFenced if this replica already knows the run is another's."""
        if self.fenced:
            raise RunFenced(self.run_id or "")

    def params(self) -> dict[str, Any]:
        """OWNED's parameters."""
        return {"fence_run": self.run_id, "fence_epoch": self.epoch}

    def refused(self) -> RunFenced:
        """A statement conditional on OWNED found another epoch: fenced from now on."""
        self.fenced = True
        return RunFenced(self.run_id or "")

    async def verify(self) -> None:
        """Ask PostgreSQL, never a cache: right before a request that cannot be taken back.
        One indexed read by primary key (bench/fencing.py measures it)."""
        self.check()
        if self.run_id is None or self.db is None:
            return
        epoch = await epoch_of(self.db, self.run_id)
        if epoch is not None and epoch != self.epoch:
            raise self.refused()


CURRENT: ContextVar[RunFence | None] = ContextVar("agentchat_run_fence", default=None)


def current() -> RunFence:
    """The fence of the run whose task this is; outside a run, a new one that fences nothing
    (its own: a refusal could never mark a shared one)."""
    return CURRENT.get() or RunFence()
