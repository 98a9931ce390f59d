"""A card's answer (docs/protocol.md §3–§4): confirm, deny, or a new message over a pending
card (denied). The answer is serialized per conversation (the caller holds the conversation's
lock on `conn`): exactly one of two racing answers resolves the card. A confirm asks the
sidecar again with the token of now (roles revoked meanwhile run nothing). The card, its audit
rows (the re-check's decision, the answer, why the call will not run) and the turn's row are
written in the caller's transaction; the span `agentchat.card.answer` and CARDS / CARD_ANSWER
count it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from opentelemetry import trace

from agentchat.agent.audit import store as audit_store
from agentchat.agent.audit.store import CallRef, Entry
from agentchat.agent.audit.trail import AuditTrail, decision_detail
from agentchat.agent.chat.turn_task import TurnRunner
from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.agent.graph.taint import context_taint
from agentchat.agent.metrics import CARD_ANSWER, CARDS
from agentchat.agent.storage import confirmations, submits
from agentchat.agent.storage import grants as grant_records
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db, Row, connection
from agentchat.catalog import Tool
from agentchat.catalog_source import CatalogSource
from agentchat.db import conversation_lock
from agentchat.digest import object_key
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal

TRACER = trace.get_tracer("agentchat.agent")
Conn = psycopg.AsyncConnection[Any]
# A requester's confirm of a call that now needs someone else's approval, no grant covering it.
APPROVAL_REQUIRED = "approval_required"


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
                     approved: dict[str, Any] | None = None,
                     approve: list[str] | None = None) -> Answered:
        """`confirm` or `deny` of the pending card, in the action's transaction: each listed
        call's result (confirmed, denied, expired) and re-check, if one was made. `approve`:
        the calls of a confirm that run (the rest are denied); a call not on the card is
        INVALID_REQUEST, nothing changed. After the re-checks, one round trip: the card
        resolved, the calls' audit columns and the trail's head read together; the audit
        rows and the turn's row go with the COMMIT."""
        conn, pending, last = action.conn, action.opened.pending, action.opened.last
        if pending is None:
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                 "there is no pending confirmation")
        if confirm_id is not None and confirm_id != pending["confirm_id"]:
            raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                 "that confirmation is no longer pending")
        card = pending["payload"]
        calls = listed_calls(pending["payload"], pending["call_id"])
        ids = [c["call_id"] for c in calls]
        if approve is not None and (kind != "confirm" or not set(approve) <= set(ids)):
            raise AgentChatError(ErrorCode.INVALID_REQUEST,
                                 "approve names a call that is not on the card"
                                 if kind == "confirm" else "approve goes with confirm only")
        if approved is not None and approved.get("approval_id") != pending["confirm_id"]:
            raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                 "that approval is no longer pending")
        per: dict[str, tuple[str, dict[str, Any] | None]]
        if pending["expired"]:
            per = {i: ("expired", None) for i in ids}
        elif approved is not None:
            # Decided by approvers (chat/approvals.py): each answer and the sidecar's
            # check of each approver are already in the trail; the last checks are in force.
            # An approval covers every listed call together.
            checks = approved.get("decisions") or {ids[0]: approved["decision"]}
            result = "confirmed" if kind == "confirm" else "denied"
            per = {i: (result, checks.get(i)) for i in ids}
        elif kind == "confirm" and card.get("approval"):
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 "someone else must approve this; you may only cancel it")
        elif kind == "confirm" and not card.get("permission_granted", True):
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 "this action is not permitted for you; close the card")
        elif kind == "confirm":
            # The card was decided minutes ago: ask again with the token of now, so roles
            # revoked meanwhile run nothing; each approved call on its own. POLICY_UNAVAILABLE
            # leaves the card pending.
            chosen = [c for c in calls if approve is None or c["call_id"] in approve]
            rechecks = await self._recheck(chosen, token, pending["conversation_id"], last)
            per = {i: ("denied", None) for i in ids}
            for i, d in rechecks.items():
                per[i] = ("denied" if d["decision"] == "deny" else "confirmed", d)
        else:
            per = {i: ("denied", None) for i in ids}
        answered = Answered.of(per, ids, batched=bool(card.get("calls")),
                               by_approval=approved is not None)
        cid = pending["conversation_id"]
        audited = self.audit is not None and self.audit.enabled
        async with conn.pipeline():
            resolved = await confirmations.send_resolve(
                conn, pending["confirm_id"], answered.result, answered.card(card))
            if audited:
                decisions = [await audit_store.send_last_decision(conn, cid, i) for i in ids]
                placing = await audit_store.place(conn, [cid], [(cid, i, "not_run")
                                                                for i in ids])
        if await resolved.fetchone() is None:
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                 "the confirmation was already answered")
        if audited:
            entries: list[Entry] = []
            for i, decision in zip(ids, decisions, strict=True):
                ref = audit_store.ref_from_row(await decision.fetchone(), cid, i)
                result, recheck = per[i]
                entries += (self._answer_entries(ref, pending, principal, tab, kind, result,
                                                 recheck)
                            if approved is None else self._approved_entries(ref, result))
            rows = await audit_store.insert_rows(placing, entries) if entries else None
            if rows is not None:
                action.then(rows[0], rows[1])
        if pending["turn_id"]:
            action.then(turn_records.RESUME_TURN, {"id": pending["turn_id"]})
        count_answer(pending, answered.result)
        return answered

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
                card = pending["payload"] or {}
                ids = [c["call_id"] for c in listed_calls(card, pending["call_id"])]
                answered = Answered.of({i: ("denied", None) for i in ids}, ids,
                                       batched=bool(card.get("calls")))
                async with conn.transaction():
                    if not await confirmations.resolve_confirmation(
                            conn, pending["confirm_id"], "denied", answered.card(card)):
                        return []
                    await self._audit_answer(conn, pending, principal, tab,
                                             "new_message", "denied", None)
                count_answer(pending, "denied")
        await self.runner.close_dangling(conversation_id, "not run: the user denied it",
                                         "denied")
        if pending["turn_id"]:
            await turn_records.finish_turn(self.pool, pending["turn_id"], "completed")
        return [answered.event(pending["confirm_id"])]

    async def _audit_answer(self, conn: Conn, pending: Row, principal: Principal, tab: str,
                            action: str, result: str, recheck: dict[str, Any] | None) -> None:
        """The answer's audit rows on each listed call, in the caller's transaction, so the
        card and its answer agree (a new message over a card)."""
        if self.audit is None:
            return
        entries: list[Entry] = []
        for call in listed_calls(pending["payload"], pending["call_id"]):
            ref = await self.audit.record_of(pending["conversation_id"], call["call_id"], conn)
            entries += self._answer_entries(ref, pending, principal, tab, action, result,
                                            recheck)
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

    async def _recheck(self, calls: list[dict[str, Any]], token: str, conversation_id: str,
                       last: Row | None) -> dict[str, dict[str, Any]]:
        """The sidecar's decision now on each listed call (same tool, arguments, context)."""
        catalog = self.catalogs.current()  # the revision of now, as the check's token is
        state = await self.runner.state(conversation_id)
        taint = context_taint(state.values.get("messages", []),
                              ((last or {}).get("plan") or {}).get("uicontext"))
        out: dict[str, dict[str, Any]] = {}
        for call in calls:
            tool = catalog.get(str(call.get("tool_name")))
            if tool is None:
                out[call["call_id"]] = {"decision": "deny", "required_role": None,
                                        "alternatives": []}
                continue
            arguments = call.get("arguments") or {}
            decision = await self.policy.check_call(user_jwt=token, tool=tool,
                                                    arguments=arguments,
                                                    untrusted=taint is not None,
                                                    catalog_revision=catalog.revision)
            decision = await self._granted(conversation_id, tool, arguments, decision)
            out[call["call_id"]] = {**decision, "untrusted_source": taint}
        return out

    async def _granted(self, conversation_id: str, tool: Tool, arguments: dict[str, Any],
                       d: dict[str, Any]) -> dict[str, Any]:
        """The requester's confirm stands for their own card only: where the policy of now
        sends the call to someone else's approval (a grant's call carded for an untrusted
        context, docs/protocol.md §11), a live grant must still cover it; revoked or expired
        meanwhile, the call does not run."""
        if (d.get("decision") != "allow_with_confirmation"
                or (d.get("approval") or {}).get("mode") != "other"):
            return d
        grant_id = await grant_records.covering(
            self.pool, conversation_id, tool.name, d.get("env_context"),
            object_key(arguments, tool.free_text))
        if grant_id is not None:
            return {**d, "grant_id": grant_id}
        return {**d, "decision": "deny", "reason_code": APPROVAL_REQUIRED,
                "required_role": None, "alternatives": []}


def listed_calls(card: dict[str, Any] | None, call_id: str) -> list[dict[str, Any]]:
    """The calls a card lists (`call_id`, `tool_name`, `arguments`): a batched card's `calls`
    (docs/protocol.md §11), else its one call (`call_id`, its row's)."""
    card = card or {}
    if card.get("calls"):
        return list(card["calls"])
    return [{"call_id": call_id, "tool_name": card.get("tool_name"),
             "arguments": card.get("tool_args") or {}}]


@dataclass(frozen=True)
class Answered:
    """A card's answer: the card's result (`confirmed` when any listed call runs), the first
    call's re-check, for a batched card each call's result and re-check, and whether
    approvers gave it (the turn then resumes under an approver's token)."""

    result: str
    recheck: dict[str, Any] | None
    calls: dict[str, dict[str, Any]] | None
    by_approval: bool = False

    @classmethod
    def of(cls, per: dict[str, tuple[str, dict[str, Any] | None]], ids: list[str], *,
           batched: bool, by_approval: bool = False) -> Answered:
        results = [per[i][0] for i in ids]
        result = ("confirmed" if "confirmed" in results
                  else "expired" if "expired" in results else "denied")
        calls = {i: {"result": r, "recheck": d} for i, (r, d) in per.items()} if batched else None
        return cls(result, per[ids[0]][1], calls, by_approval)

    def resume(self, confirm_id: str) -> dict[str, Any]:
        """The graph's resume value (agent/graph/verdicts.py `ask_card`); `approval: true`
        when approvers gave it: their token then runs only what they approved."""
        out: dict[str, Any] = {"result": self.result, "confirm_id": confirm_id,
                               "recheck": self.recheck}
        if self.by_approval:
            out["approval"] = True
        return {**out, "calls": self.calls} if self.calls is not None else out

    def event(self, confirm_id: str) -> dict[str, Any]:
        """`confirm_resolved` (docs/protocol.md §2); a batched card's lists each call's result
        (`calls`, null for a card of one call)."""
        return {"type": "confirm_resolved", "confirm_id": confirm_id, "result": self.result,
                "calls": None if self.calls is None else [
                    {"call_id": i, "result": a["result"]} for i, a in self.calls.items()]}

    def card(self, card: dict[str, Any]) -> dict[str, Any] | None:
        """A batched card as answered (each call with its `result`); None for a card of one
        call (its row's status says it all)."""
        if self.calls is None:
            return None
        return {**card, "calls": [{**c, "result": self.calls.get(c["call_id"], {}).get(
            "result", "denied")} for c in card.get("calls") or []]}


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
