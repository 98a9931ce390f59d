"""A judged call run once, for every caller: the request built from the catalog revision its
decision was judged under (another revision runs nothing: `catalog_changed`), both tokens,
its Idempotency-Key, each attempt fenced by the run's epoch (agent/storage/fencing.py; a call
outside a run has no epoch to lose), and its execution row on the audit trail before anyone
sees the result. A call stopped while it ran may have run: its row says `cancelled`, with
the key and decision its ss-tools audit is found by.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agentchat.agent.audit.trail import cut_text
from agentchat.agent.gate.audit_rows import CallAudit
from agentchat.agent.gate.tool_runtime import Emit, ToolOutcome, ToolRuntime
from agentchat.catalog import Catalog
from agentchat.words import Lang

CHANGED_TEXT = "not run: the tool catalog changed after this call was checked; ask again"


@dataclass(frozen=True)
class JudgedCall:
    """A call the gate let run: its id, tool and arguments as checked, the catalog revision it
    was judged under, the decision in force and the Idempotency-Key it runs with."""

    call_id: str
    tool: str
    args: dict[str, Any]
    judged_revision: str | None
    decision_id: str | None
    idempotency_key: str | None


class Execution:
    def __init__(self, tools: ToolRuntime) -> None:
        self.tools = tools

    @staticmethod
    def changed(call: JudgedCall, catalog: Catalog) -> bool:
        """The catalog changed after the sidecar judged this call (a path or method may
        differ now): nothing is built from a revision it did not judge."""
        return call.judged_revision != catalog.revision

    async def record_changed(self, rows: CallAudit, call: JudgedCall) -> None:
        await rows.stage(call.call_id, call.tool, call.args, "not_run",
                         {"reason": "policy_unavailable", "detail": "catalog_changed"})

    async def run(self, rows: CallAudit, call: JudgedCall, *, catalog: Catalog,
                  user_jwt: str, emit: Emit, lang: Lang) -> ToolOutcome:
        """The call against ss-tools, and its execution row."""
        base = {"idempotency_key": call.idempotency_key, "decision_id": call.decision_id}
        try:
            outcome = await self.tools.run(
                catalog=catalog, tool_name=call.tool, call_id=call.call_id, args=call.args,
                user_jwt=user_jwt, idempotency_key=call.idempotency_key, emit=emit,
                lang=lang, decision_id=call.decision_id)
        except asyncio.CancelledError:
            # Stopped while it ran: ss-tools may have executed it, so the trail says so,
            # with the key and decision its audit is found by. Shielded: the caller's task
            # is being cancelled, and a second cancel must not lose the row.
            await asyncio.shield(rows.stage(call.call_id, call.tool, call.args, "execution", {
                **base, "outcome": "cancelled", "replayed": False, "attempts": None,
                "duration_ms": None, "error": "the turn was stopped while the call ran"}))
            raise
        # An upstream MCP tool's row names its server and the caller: the upstream runs every
        # call as one account, the trail says who asked. `unknown`: a write that may have run.
        upstream = {"upstream": outcome.upstream} if outcome.upstream else {}
        await rows.stage(call.call_id, call.tool, call.args, "execution", {
            **base, "outcome": outcome.status, "replayed": outcome.replayed,
            "attempts": outcome.attempts, "duration_ms": outcome.duration_ms,
            "error": cut_text(outcome.error), **upstream})
        return outcome
