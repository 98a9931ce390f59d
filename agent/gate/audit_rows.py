"""The audit rows the gate's steps append for one caller's calls (agent/audit/trail.py says
what each stage holds): the check's decision, why a call did not run, its execution.

A caller binds where its calls' rows go (`CallAudit`): a chat turn's conversation and turn,
or an MCP call's own record (its call id as both the conversation and the call: the
calls table names its owner, agent/storage/gated_call_rows.py). The first row of a call names its
`channel` (`chat` or `mcp`) and what the channel says of the call (a chat turn: its branch,
docs/protocol.md §4; an MCP call: the token's `azp` and the client's own name and version,
marked unverified).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentchat.agent.audit.store import CallRef, Entry
from agentchat.agent.audit.trail import AuditTrail, cut_text, decision_detail
from agentchat.agent.gate.checks import REFUSED


@dataclass(frozen=True)
class CallAudit:
    """Where one caller's calls are recorded; None `audit`: no trail."""

    audit: AuditTrail | None
    conversation_id: str
    turn_id: str
    channel: str = "chat"  # chat | mcp
    # On the decision row, besides the check's own fields (chat: {"branch": ...}).
    about: dict[str, Any] = field(default_factory=dict)
    # On the refusal's not_run row of a call refused before it ran (chat: its branch).
    refusal_about: dict[str, Any] = field(default_factory=dict)
    # The requester, for calls outside a conversation (None: the conversation's owner).
    owner: str | None = None

    def ref(self, call_id: str, tool: str, args: Any) -> CallRef | None:
        """The columns of an audited call's rows; None when the call is not audited."""
        audit = self.audit
        if audit is None or not audit.audited(tool):
            return None
        return audit.ref(conversation_id=self.conversation_id, turn_id=self.turn_id,
                         call_id=call_id, tool=tool, args=args, owner=self.owner)

    def decision(self, call_id: str, tool: str, args: Any, d: dict[str, Any],
                 taint: str | None) -> list[Entry]:
        """The decision row of an audited call (a refused one: why it does not run)."""
        ref = self.ref(call_id, tool, args)
        if ref is None:
            return []
        out = []
        if d.get("decision_id"):  # the sidecar answered (a refusal of its own included)
            detail = {**decision_detail(d, kind="check", taint=taint), **self.about,
                      "channel": self.channel}
            if d.get("grant_id"):  # covered by a time-boxed grant (docs/protocol.md §11)
                detail["grant_id"] = d["grant_id"]
            out.append(ref.entry("decision", detail))
        if d.get("decision") == REFUSED:
            out.append(ref.entry("not_run", {"reason": "refused", **self.refusal_about,
                                             "detail": cut_text(d.get("detail"))}, once=True))
        return out

    def not_run(self, call_id: str, tool: str, args: Any, reason: str,
                detail: str | None) -> list[Entry]:
        ref = self.ref(call_id, tool, args)
        if ref is None:
            return []
        return [ref.entry("not_run", {"reason": reason, "detail": cut_text(detail)}, once=True)]

    async def append(self, entries: list[Entry]) -> None:
        if self.audit is not None:
            await self.audit.append(entries)

    async def stage(self, call_id: str, tool: str, args: Any, stage: str,
                    detail: dict[str, Any]) -> None:
        """One row for an audited call, right after what it records (an execution is on the
        chain before anyone sees its result)."""
        ref = self.ref(call_id, tool, args)
        if ref is not None and self.audit is not None:
            await self.audit.append([ref.entry(stage, detail)])
