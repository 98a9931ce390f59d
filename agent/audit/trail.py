"""What each site of the risky-call path appends, in the domain's words.

- decision: the policy node, and the re-check of a confirm (chat/card_answers.py): kind (check or
  recheck), decision_id, decision, policy_revision, reason_code, risk, untrusted and
  untrusted_source (tool_output, file or uicontext: agent/graph/taint.py).
- card: agent/storage/confirmations.py when the card is stored, i.e. shown (to the row's
  owner): confirm_id, prompt, permission_granted, expires_at, reason (why an untrusted
  card is asked, in the turn's language).
- answer: chat/card_answers.py, in the transaction that resolves the card: confirm_id, by, session
  (a keyed hash of the tab or Gradio session, `session_ref`; never the raw value), action,
  result.
- execution: the tools node after the ss-tools call: idempotency_key, decision_id, outcome,
  replayed, attempts, duration_ms, error; outcome `cancelled` when the turn was stopped while
  the call ran (it may have run: ss-tools' audit says, by key or decision_id).
- takeover: another replica took over the run while the call was in flight or confirmed and
  not yet sent (docs/protocol.md §4, "Takeover"): run_id, attempt, replica (the new owner),
  after_seq; the call then has one execution, its request re-sent with the same idempotency key.

Rows a run appends (every stage above from its turn's task, and the new owner's `takeover`)
are fenced by the run's epoch in the appending statement (agent/storage/fencing.py): a replica
revived after its run was taken over appends nothing more. A card's answer and REST
approvals are not a run's: they append as before.
- not_run: why it did not run (refused, denied, permission_denied, revoked, expired,
  halted, policy_unavailable, not_approved, rate_limited) and a detail: the confirm, tools
  and policy nodes, card_answers.py, an MCP call over its user's pending cap.

Which calls: every call of a write or destructive tool, and of a tool the catalog does not
know (a tool without risk metadata counts as destructive). The decision is taken once per
call, so the switch and that rule are applied there: the other stages join a call that has
a decision row (or, for a call refused before the sidecar, its not_run row is its record).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from agentchat.agent.audit import store
from agentchat.agent.audit.chain import args_digest
from agentchat.agent.audit.store import CallRef, Entry
from agentchat.agent.storage.db import Db
from agentchat.agent.storage.fencing import RunFence
from agentchat.catalog import Catalog
from agentchat.catalog_source import CatalogSource

MAX_TEXT = 500  # prompts and errors: what a reader needs, not whole outputs


def decision_detail(d: dict[str, Any], *, kind: str, taint: str | None) -> dict[str, Any]:
    """`taint`: why the model's context was untrusted (agent/graph/taint.py), or None."""
    return {"kind": kind, "decision_id": d.get("decision_id"), "decision": d.get("decision"),
            "policy_revision": d.get("policy_revision"), "reason_code": d.get("reason_code"),
            "risk": d.get("risk"), "untrusted": taint is not None, "untrusted_source": taint}


def cut_text(value: Any) -> str | None:
    return None if value is None else str(value)[:MAX_TEXT]


class AuditTrail:
    """The agent's handle on the trail: the switch, the catalog (which calls), the pool."""

    def __init__(self, *, db: Db, catalogs: CatalogSource, enabled: bool = True,
                 session_key: str | None = None) -> None:
        self.db = db
        self.catalogs = catalogs
        self.enabled = enabled
        # Unset: a key of this process only (hashes still tell one tab's answers apart within
        # it, but not across replicas or restarts: set AGENTCHAT_AGENT_AUDIT_SESSION_KEY).
        self._session_key = (session_key or secrets.token_hex(32)).encode()

    def session_ref(self, session: str) -> str:
        """What the trail keeps of a tab id or Gradio session hash: a keyed hash, so an
        auditor can tell answers from one tab apart but never learns the hash that would
        let them cancel or read that tab's stream."""
        return hmac.new(self._session_key, session.encode(), hashlib.sha256).hexdigest()[:32]

    @property
    def catalog(self) -> Catalog:
        return self.catalogs.current()

    def audited(self, tool: str) -> bool:
        known = self.catalog.get(tool)
        return self.enabled and (known is None or known.risk != "read")

    def ref(self, *, conversation_id: str, turn_id: str, call_id: str, tool: str,
            args: Any, owner: str | None = None) -> CallRef:
        known = self.catalog.get(tool)
        arguments = args if isinstance(args, dict) else {}
        env = None
        if known is not None:
            found = known.environments_of(arguments)[0]
            env = found if found in self.catalog.environments else None
        return CallRef(conversation_id, turn_id, call_id, tool, env, args_digest(arguments),
                       owner)

    async def append(self, entries: list[Entry], db: Db | None = None,
                     fence: RunFence | None = None) -> None:
        """Fenced by `fence`, by default the current run's (none outside a run)."""
        if self.enabled and entries:
            await store.append(db if db is not None else self.db, entries, fence)

    async def record_of(self, conversation_id: str, call_id: str,
                        db: Db | None = None) -> CallRef | None:
        """The call's columns as its decision row has them; None when it is not audited."""
        if not self.enabled:
            return None
        return await ref_from_decision(db if db is not None else self.db, conversation_id,
                                       call_id)


async def taken_over(trail: AuditTrail | None, *, conversation_id: str,
                     detail: dict[str, Any], fence: RunFence) -> int:
    """A `takeover` row on each of the conversation's audited calls still in flight, fenced
    by the epoch the new owner claimed (`fence`); how many."""
    if trail is None or not trail.enabled:
        return 0
    calls = await store.in_flight(trail.db, conversation_id)
    await trail.append([c.entry("takeover", detail) for c in calls], fence=fence)
    return len(calls)


async def ref_from_decision(db: Db, conversation_id: str, call_id: str) -> CallRef | None:
    return store.ref_from_row(await store.last_decision(db, conversation_id, call_id),
                              conversation_id, call_id)


async def card_shown(db: Db, *, conversation_id: str, turn_id: str, card: dict[str, Any]) -> None:
    """The card row of each audited call on the card (one with a decision row), once per
    card; a batched card's (docs/protocol.md §11) on every call it lists, each with its own
    prompt."""
    listed = card.get("calls") or [{"call_id": card.get("call_id"), "prompt": card.get("prompt")}]
    entries = []
    for call in listed:
        call_id = str(call.get("call_id") or "")
        ref = await ref_from_decision(db, conversation_id, call_id)
        if ref is None:
            continue
        ref = CallRef(conversation_id, turn_id or ref.turn_id, call_id, ref.tool,
                      ref.environment, ref.args_hash, ref.owner)
        batch = {"calls": len(listed)} if card.get("calls") else {}
        # Who answers the card of a call from outside a chat (an MCP call): inline,
        # confirmation (the requester, on the page) or approval.
        asked = {"asked": card["asked"]} if card.get("asked") else {}
        entries.append(ref.entry("card", {
            "confirm_id": card.get("confirm_id"), "prompt": cut_text(call.get("prompt")),
            "permission_granted": bool(card.get("permission_granted", True)),
            "expires_at": card.get("expires_at"), "reason": cut_text(card.get("reason")),
            **batch, **asked, **_approval_detail(card)}, once=True))
    await store.append(db, entries)


def _approval_detail(card: dict[str, Any]) -> dict[str, Any]:
    """Who must answer a card someone else approves (docs/protocol.md §11); nothing for the
    others."""
    approval = card.get("approval")
    if not isinstance(approval, dict):
        return {}
    return {"approval": {k: approval.get(k) for k in (
        "mode", "approval_id", "approvers", "quorum", "expires_at")}}
