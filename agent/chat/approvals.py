"""Approvals by someone else (docs/protocol.md §11): an approver's answer, the
inbox, and the turn's resume once the quorum is met.

An answer is checked, in this order and under the conversation's lock, so each refusal has
its code and changes nothing: someone who may not see the approval (NOT_FOUND, before
anything else: no other answer tells them it exists or what it binds), the requester
(FORBIDDEN), an approval no longer pending (APPROVAL_EXPIRED, or NO_PENDING_CONFIRMATION
once approved, denied or cancelled), the same approver twice (ALREADY_ANSWERED), a digest
that is not the card's (STALE_CONFIRMATION), then the sidecar with the approver's own token
and the current policy (not an approver there, or not permitted the call: FORBIDDEN), and a
grant longer than the current rule allows (FORBIDDEN). People are compared by `subject_key`,
never as raw `sub` strings. The approval of a stored MCP call (agent/chat/gated_calls.py) is
answered the same way; once decided, the call runs there (`gated`), not as a turn. The
answer, the sidecar's decision on the approver and the audit rows are one transaction. A
deny, or the quorum's last approval, resumes the turn as a new run through `Chat.submit`
(the requester's conversation, their tab's lease): the card is resolved there, once, and the
call runs with the card's idempotency key under the token of the approver whose answer
decided it (the requester's token is never stored). That token serves those calls only: the
graph runs no other call of the message, then answers without tools (agent/graph/builder.py
`answer`), and the run never keeps it for a takeover.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentchat.agent.audit.trail import AuditTrail, decision_detail
from agentchat.agent.chat.card_answers import listed_calls
from agentchat.agent.chat.facade import Chat
from agentchat.agent.chat.request import ChatRequest
from agentchat.agent.gate.checks import UNTRUSTED_CARD
from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.agent.graph.cards import APPROVE_PATH
from agentchat.agent.storage import approvals as records
from agentchat.agent.storage import grants as grant_records
from agentchat.agent.storage import outbox
from agentchat.agent.storage.db import Db, Row, connection
from agentchat.catalog_source import CatalogSource
from agentchat.db import conversation_lock
from agentchat.digest import object_key
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal

log = logging.getLogger("agentchat.agent")

__all__ = ["APPROVAL_ID", "APPROVE_PATH", "ApprovalAnswer", "Approvals"]

RESUME_ATTEMPTS = 8
# (the approval's row, the deciding approver's token, approved | denied, the checks by call)
GatedHook = Callable[[Row, str, str, dict[str, dict[str, Any]]], Awaitable[None]]


@dataclass(frozen=True)
class ApprovalAnswer:
    decision: str  # approve | deny
    args_digest: str
    comment: str = ""
    channel: str = "rest"
    grant_minutes: int | None = None  # approve, and cover the same calls for this long


# An approval's id is its card's confirm_id (a UUID); anything else names none (and never
# reaches a statement: text columns hold no NUL).
APPROVAL_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def not_found() -> AgentChatError:
    return AgentChatError(ErrorCode.NOT_FOUND, "no such approval")


def subject_key(sub: str) -> str:
    """A person as approvals compare them: the token's `sub` case-folded and NFKC-normalized
    (Unicode's NFKC_Casefold, close enough), so `Alice` is never someone else than `alice`.
    The IdP must never give two people subjects equal under it (the chart's README)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", sub).casefold())


def same_person(a: str, b: str) -> bool:
    return subject_key(a) == subject_key(b)


class Approvals:
    def __init__(self, *, pool: Db, chat: Chat, policy: PolicyClient, catalogs: CatalogSource,
                 audit: AuditTrail | None) -> None:
        self.pool = pool
        self.chat = chat
        self.policy = policy
        self.catalogs = catalogs
        self.audit = audit
        # A stored call's approval decided (agent/chat/gated_calls.py `on_approval`): it runs
        # there, not as a turn. Set by wiring.
        self.gated: GatedHook | None = None

    # -- reading ----------------------------------------------------------------------------

    async def visible(self, approval_id: str, user: Principal) -> Row:
        """One approval for its requester or a holder of one of its approver roles; anyone
        else: NOT_FOUND (never revealed as existing)."""
        row = (await records.get_approval(self.pool, approval_id)
               if APPROVAL_ID.match(approval_id) else None)
        if row is None or not self._may_see(row, user):
            raise not_found()
        return row

    @staticmethod
    def _may_see(row: Row, user: Principal) -> bool:
        return same_person(str(row["requester"]), user.sub) or records.may_see(row, user.roles)

    async def inbox(self, user: Principal, *, status: str, limit: int,
                    after: tuple[datetime, str] | None
                    ) -> tuple[list[Row], tuple[datetime, str] | None]:
        """What `user` may answer, newest first, never their own requests (as a person: the
        SQL's `<>` compares raw subjects, so a page may be short); the next page's key."""
        rows = await records.inbox(self.pool, me=user.sub, roles=user.roles, status=status,
                                   limit=limit + 1, after=after)
        last = rows[limit - 1] if len(rows) > limit else None
        mine = [r for r in rows[:limit] if not same_person(str(r["requester"]), user.sub)]
        return mine, None if last is None else (last["created_at"], last["approval_id"])

    async def detail(self, approval_id: str, user: Principal) -> tuple[Row, str | None]:
        """A visible approval and the requester's message of its turn."""
        row = await self.visible(approval_id, user)
        ctx = await records.context_of(self.pool, row)
        return row, (ctx or {}).get("message")

    async def grants(self, user: Principal) -> list[dict[str, Any]]:
        """The caller's grants, and those they gave, newest first (at most 200)."""
        return [grant_records.as_item(r) for r in await grant_records.list_grants(self.pool,
                                                                                   user.sub)]

    async def revoke_grant(self, grant_id: str, user: Principal) -> dict[str, Any]:
        """Revoke at once (its requester or its approver); anyone else: NOT_FOUND."""
        row = (await grant_records.revoke(self.pool, grant_id, user.sub)
               if APPROVAL_ID.match(grant_id) else None)
        if row is None:
            raise AgentChatError(ErrorCode.NOT_FOUND, "no such grant")
        return grant_records.as_item(row)

    # -- answering --------------------------------------------------------------------------

    async def answer(self, approval_id: str, approver: Principal, token: str,
                     body: ApprovalAnswer) -> dict[str, Any]:
        first = (await records.get_approval(self.pool, approval_id)
                 if APPROVAL_ID.match(approval_id) else None)
        if first is None or not self._may_see(first, approver):
            raise not_found()
        cid = str(first["conversation_id"])
        decided: str | None = None
        async with connection(self.pool) as conn, conversation_lock(conn, cid):
            async with conn.transaction():
                row = await records.get_approval(conn, approval_id, lock=True)
                if row is None:
                    raise not_found()
                checks, allowed = await self._refusals(row, approver, token, body)
                check = next(iter(checks.values()))  # the first listed call's
                added = await records.add_answer(
                    conn, approval_id=approval_id, approver=approver.sub,
                    decision=body.decision, comment=body.comment, channel=body.channel,
                    decision_id=check.get("decision_id"), grant_minutes=body.grant_minutes)
                if added is None:  # a racing second answer of the same person
                    raise AgentChatError(ErrorCode.ALREADY_ANSWERED,
                                         "you have already answered this approval")
                count, grant_minutes = added
                if body.decision == "deny":
                    decided = "denied"
                elif count >= int(row["quorum"]):
                    decided = "approved"
                if decided is not None and not await records.decide(conn, approval_id,
                                                                    decided):
                    raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                         "this approval was already decided")
                grant = None
                if decided == "approved" and grant_minutes and allowed:
                    # Earlier approvers asked under the rule of their time: never past now's.
                    grant = await self._grant(conn, row, approver, min(grant_minutes, allowed))
                await self._audit(conn, row, approver, body, checks, decided or "pending")
                await outbox.enqueue(conn, approval_id, "approval_answered", {
                    "approver": approver.sub, "decision": body.decision,
                    "status": decided or "pending", "comment": body.comment})
        run_id = None
        if decided is not None and row.get("gated"):
            if self.gated is not None:
                await self.gated(row, token, decided, checks)
        elif decided is not None:
            run_id = await self._resume(row, token, decided, checks)
        return {"approval_id": approval_id, "status": decided or "pending",
                "approvals": count if body.decision == "approve" else 0,
                "quorum": int(row["quorum"]), "run_id": run_id,
                "grant_id": grant["grant_id"] if grant else None}

    async def _grant(self, conn: Any, row: Row, approver: Principal,
                     minutes: int) -> Row | None:
        """A time-boxed grant for the requester's same calls (same tool, environment and
        arguments but the catalog's free text: `object_key`), asked by every approval that met
        the quorum; one per listed call (a batched card's, each its own). The first is
        returned."""
        first = None
        for call in listed_calls(row["card"], str(row["call_id"])):
            tool = self.catalogs.current().get(str(call["tool_name"]))
            free_text = tool.free_text if tool is not None else ()
            grant = await grant_records.add_grant(
                conn, approval_id=row["approval_id"], requester=row["requester"],
                tool=call["tool_name"], environment=row["environment"],
                object_key=object_key(call["arguments"], free_text), granted_by=approver.sub,
                minutes=minutes)
            first = first or grant
        return first

    async def _refusals(self, row: Row, approver: Principal, token: str,
                        body: ApprovalAnswer) -> tuple[dict[str, dict[str, Any]], int]:
        """Each refusal with its code, nothing written; else the sidecar's decision on the
        approver (current token, current policy) for each listed call, by call id: an
        approval covers a batched card's calls together, so the approver must be one for
        every call (and permitted every call, to approve). Also the longest grant the
        current rule allows (minutes; 0: none)."""
        if same_person(approver.sub, str(row["requester"])):
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 "you asked for this; someone else must approve it")
        status = row["status"]
        if status == "expired":
            raise AgentChatError(ErrorCode.APPROVAL_EXPIRED,
                                 "this approval expired; nothing will run")
        if status != "pending":
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                 f"this approval is no longer pending ({status})")
        if any(same_person(str(a["approver"]), approver.sub) for a in row["answers"]):
            raise AgentChatError(ErrorCode.ALREADY_ANSWERED,
                                 "you have already answered this approval")
        if body.args_digest != row["args_digest"]:
            raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                 "args_digest is not the card's: the approval is for other "
                                 "arguments")
        card = row["card"] or {}
        catalog = self.catalogs.current()
        checks: dict[str, dict[str, Any]] = {}
        for call in listed_calls(row["card"], str(row["call_id"])):
            tool = catalog.get(str(call["tool_name"]))
            if tool is None:
                raise AgentChatError(ErrorCode.FORBIDDEN,
                                     "this action is no longer in the catalog")
            check = await self.policy.check_call(
                user_jwt=token, tool=tool, arguments=call["arguments"],
                # A stored MCP call is untrusted whatever its card's reason.
                untrusted=card.get("reason_code") == UNTRUSTED_CARD
                or bool(card.get("untrusted_source")),
                catalog_revision=catalog.revision)
            if not check.get("may_approve"):
                roles = ", ".join(row["approvers"])
                raise AgentChatError(ErrorCode.FORBIDDEN,
                                     f"you may not answer this (approver roles: {roles})")
            if body.decision == "approve" and check.get("decision") == "deny":
                # An approval runs the call under the approver's token: they must be
                # permitted it.
                raise AgentChatError(ErrorCode.FORBIDDEN,
                                     "you may deny this, but not approve it: the call would "
                                     "run under your token, which may not run it")
            checks[call["call_id"]] = check
        # The rule of now (the sidecar's answer), not the one stored with the card: a rule
        # that stopped allowing grants gives none, a pending approval's included.
        allowed = min(_grant_max(check) for check in checks.values())
        if body.grant_minutes is not None and (body.decision != "approve"
                                               or body.grant_minutes > allowed):
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 f"this rule allows grants of at most {allowed} minutes"
                                 if allowed else "this rule allows no time-boxed grants")
        return checks, allowed

    async def _audit(self, conn: Any, row: Row, approver: Principal, body: ApprovalAnswer,
                     checks: dict[str, dict[str, Any]], result: str) -> None:
        """The sidecar's check of the approver and their answer, on each listed call's
        record."""
        if self.audit is None:
            return
        entries = []
        for call_id, check in checks.items():
            ref = await self.audit.record_of(row["conversation_id"], call_id, conn)
            if ref is None:
                continue
            entries += [
                ref.entry("decision", decision_detail(check, kind="approver_check", taint=None)),
                ref.entry("answer", {"confirm_id": row["approval_id"], "by": approver.sub,
                                     "channel": body.channel, "action": body.decision,
                                     "result": result, "comment": body.comment[:500]})]
        await self.audit.append(entries, conn)

    async def _resume(self, row: Row, token: str, decided: str,
                      checks: dict[str, dict[str, Any]]) -> str | None:
        """The turn goes on as a new run of the requester's conversation, through the one
        door: the card is resolved there (once: a conditional update), the call runs with the
        card's idempotency key. A conversation busy with the requester's own run is tried
        again for a few seconds; after that the approval stays decided, its card pending (the
        requester cancels it), and the log says so."""
        req = ChatRequest(text="__resume__",
                          action="confirm" if decided == "approved" else "deny",
                          conversation_id=str(row["conversation_id"]), uicontext=None,
                          user_id=None, user_jwt=token, env_id=None,
                          confirm_id=str(row["approval_id"]),
                          tab_id=str(row["tab_id"] or f"approval:{row['approval_id']}"),
                          approved={"approval_id": row["approval_id"],
                                    "decision": next(iter(checks.values())),
                                    "decisions": checks})
        for attempt in range(RESUME_ATTEMPTS):
            try:
                run = await self.chat.submit(req, Principal(sub=str(row["requester"])))
            except AgentChatError as e:
                if e.code == ErrorCode.CONVERSATION_BUSY and attempt + 1 < RESUME_ATTEMPTS:
                    await asyncio.sleep(0.5)  # the requester's own run still ending
                    continue
                log.warning("approval %s decided but its turn did not resume: %s",
                            row["approval_id"], e.code)
                return None
            return run.run_id
        return None


def _grant_max(check: dict[str, Any]) -> int:
    """The grant minutes the sidecar's current rule allows for a call (0: no grants, or the
    call no longer goes to someone else's approval)."""
    rule = check.get("approval") or {}
    return int(rule.get("grant_max_minutes") or 0) if rule.get("mode") == "other" else 0
