"""A card's answer (docs/protocol.md §3–§4): confirm, deny, or a new message over a pending
card (denied). The answer is serialized per conversation (the caller holds the conversation's
lock on `conn`): exactly one of two racing answers resolves the card. A confirm asks the
sidecar again with the token of now (roles revoked meanwhile run nothing). The card, its audit
rows (the re-check's decision, the answer, why the call will not run) and the turn's row are
written in the caller's transaction; the span `agentchat.card.answer` and CARDS / CARD_ANSWER
count it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from opentelemetry import trace

from agentchat.agent.audit import store as audit_store
from agentchat.agent.audit.store import CallRef, Entry
from agentchat.agent.audit.trail import AuditTrail, decision_detail
from agentchat.agent.chat.turn_task import TurnRunner
from agentchat.agent.graph.policy_client import PolicyClient
from agentchat.agent.graph.taint import context_taint
from agentchat.agent.metrics import CARD_ANSWER, CARDS
from agentchat.agent.storage import confirmations, submits
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db, Row, connection
from agentchat.catalog_source import CatalogSource
from agentchat.db import conversation_lock
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal

TRACER = trace.get_tracer("agentchat.agent")
Conn = psycopg.AsyncConnection[Any]


class CardAnswers:
    def __init__(self, *, pool: Db, runner: TurnRunner, policy: PolicyClient,
                 catalogs: CatalogSource, audit: AuditTrail | None) -> None:
        self.pool = pool
        self.runner = runner
        self.policy = policy
        self.catalogs = catalogs
        self.audit = audit

    async def answer(self, action: submits.Action, *, kind: str, confirm_id: str | None,
                     principal: Principal, token: str, tab: str,
                     approved: dict[str, Any] | None = None
                     ) -> tuple[str, dict[str, Any] | None]:
        """`confirm` or `deny` of the pending card, in the action's transaction: the result
        (confirmed, denied, expired) and the re-check's decision, if one was made. After the
        re-check, one round trip: the card resolved, the call's audit columns and the trail's
        head read together; the audit rows and the turn's row go with the COMMIT."""
        conn, pending, last = action.conn, action.opened.pending, action.opened.last
        if pending is None:
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                 "there is no pending confirmation")
        if confirm_id is not None and confirm_id != pending["confirm_id"]:
            raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                 "that confirmation is no longer pending")
        card = pending["payload"]
        recheck: dict[str, Any] | None = None
        if approved is not None and approved.get("approval_id") != pending["confirm_id"]:
            raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                 "that approval is no longer pending")
        if pending["expired"]:
            result = "expired"
        elif approved is not None:
            # Decided by approvers (issue 34, chat/approvals.py): each answer and the sidecar's
            # check of each approver are already in the trail; the last check is in force.
            recheck = approved["decision"]
            result = "confirmed" if kind == "confirm" else "denied"
        elif kind == "confirm" and card.get("approval"):
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 "someone else must approve this; you may only cancel it")
        elif kind == "confirm" and not card.get("permission_granted", True):
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 "this action is not permitted for you; close the card")
        elif kind == "confirm":
            # The card was decided minutes ago: ask again with the token of now, so roles
            # revoked meanwhile run nothing. POLICY_UNAVAILABLE leaves the card pending.
            recheck = await self._recheck(card, token, pending["conversation_id"], last)
            result = "denied" if recheck["decision"] == "deny" else "confirmed"
        else:
            result = "denied"
        cid, call_id = pending["conversation_id"], pending["call_id"]
        audited = self.audit is not None and self.audit.enabled
        async with conn.pipeline():
            resolved = await confirmations.send_resolve(conn, pending["confirm_id"], result)
            if audited:
                decision = await audit_store.send_last_decision(conn, cid, call_id)
                placing = await audit_store.place(conn, [cid], [(cid, call_id, "not_run")])
        if await resolved.fetchone() is None:
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                 "the confirmation was already answered")
        if audited:
            ref = audit_store.ref_from_row(await decision.fetchone(), cid, call_id)
            entries = (self._answer_entries(ref, pending, principal, tab, kind, result, recheck)
                       if approved is None else self._approved_entries(ref, result))
            rows = await audit_store.insert_rows(placing, entries) if entries else None
            if rows is not None:
                action.then(rows[0], rows[1])
        if pending["turn_id"]:
            action.then(turn_records.RESUME_TURN, {"id": pending["turn_id"]})
        count_answer(pending, result)
        return result, recheck

    async def deny_pending(self, conversation_id: str, principal: Principal,
                           tab: str) -> list[dict[str, Any]]:
        """A new message (or a retry) over a pending card resolves the card as denied: the
        `confirm_resolved` event the message's run starts with."""
        async with connection(self.pool) as conn, conversation_lock(conn, conversation_id):
            pending = await confirmations.pending_confirmation(conn, conversation_id)
            if pending is None:
                return []
            with TRACER.start_as_current_span("agentchat.card.answer", attributes={
                    "agentchat.conversation_id": conversation_id,
                    "agentchat.action": "new_message"}):
                async with conn.transaction():
                    if not await confirmations.resolve_confirmation(
                            conn, pending["confirm_id"], "denied"):
                        return []
                    await self._audit_answer(conn, pending, principal, tab,
                                             "new_message", "denied", None)
                count_answer(pending, "denied")
        await self.runner.close_dangling(conversation_id, "not run: the user denied it",
                                         "denied")
        if pending["turn_id"]:
            await turn_records.finish_turn(self.pool, pending["turn_id"], "completed")
        return [{"type": "confirm_resolved", "confirm_id": pending["confirm_id"],
                 "result": "denied"}]

    async def _audit_answer(self, conn: Conn, pending: Row, principal: Principal, tab: str,
                            action: str, result: str, recheck: dict[str, Any] | None) -> None:
        """The answer's audit rows in the caller's transaction, so the card and its answer
        agree (a new message over a card)."""
        if self.audit is None:
            return
        ref = await self.audit.record_of(pending["conversation_id"], pending["call_id"], conn)
        entries = self._answer_entries(ref, pending, principal, tab, action, result, recheck)
        await self.audit.append(entries, conn)

    def _approved_entries(self, ref: CallRef | None, result: str) -> list[Entry]:
        if ref is None or result == "confirmed":
            return []
        return [ref.entry("not_run", {"reason": "denied" if result == "denied" else result,
                                      "detail": "approval"}, once=True)]

    def _answer_entries(self, ref: CallRef | None, pending: Row, principal: Principal, tab: str,
                        action: str, result: str,
                        recheck: dict[str, Any] | None) -> list[Entry]:
        """The answer row (after the re-check's decision row), and why the call will not run
        unless confirmed; none for a call that is not audited (no decision row)."""
        if self.audit is None or ref is None:
            return []
        card = pending["payload"] or {}
        entries: list[Entry] = []
        if recheck is not None and recheck.get("decision_id"):
            entries.append(ref.entry("decision", decision_detail(
                recheck, kind="recheck", taint=recheck.get("untrusted_source"))))
        entries.append(ref.entry("answer", {
            "confirm_id": pending["confirm_id"], "by": principal.sub,
            "session": self.audit.session_ref(tab),
            "action": action, "result": result}))
        if result != "confirmed":
            if result == "expired":
                reason = "expired"
            elif not card.get("permission_granted", True):
                reason = "permission_denied"
            else:
                reason = "revoked" if recheck is not None else "denied"
            entries.append(ref.entry("not_run", {"reason": reason, "detail": action},
                                     once=True))
        return entries

    async def _recheck(self, card: dict[str, Any], token: str, conversation_id: str,
                       last: Row | None) -> dict[str, Any]:
        """The sidecar's decision now on the card's call (same tool, arguments, context)."""
        catalog = self.catalogs.current()  # the revision of now, as the check's token is
        tool = catalog.get(str(card.get("tool_name")))
        args = card.get("tool_args") or {}
        if tool is None:
            return {"decision": "deny", "required_role": None, "alternatives": []}
        state = await self.runner.state(conversation_id)
        taint = context_taint(state.values.get("messages", []),
                              ((last or {}).get("plan") or {}).get("uicontext"))
        decision = await self.policy.check_call(user_jwt=token, tool=tool, arguments=args,
                                                untrusted=taint is not None,
                                                catalog_revision=catalog.revision)
        return {**decision, "untrusted_source": taint}


def count_answer(pending: Row, result: str) -> None:
    """CARDS by result and the time the card waited, also on the answer's span (the current
    one: `agentchat.card.answer`)."""
    CARDS.labels(result).inc()
    created = pending.get("created_at")
    if isinstance(created, datetime):
        waited = max(0.0, (datetime.now(UTC) - created).total_seconds())
        CARD_ANSWER.observe(waited)
        span = trace.get_current_span()
        span.set_attribute("agentchat.result", result)
        span.set_attribute("agentchat.confirm_id", str(pending.get("confirm_id")))
        span.set_attribute("agentchat.card_wait_s", round(waited, 3))
