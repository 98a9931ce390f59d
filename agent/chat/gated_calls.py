"""MCP calls through the gate (the domain's door for agent/mcp/): the same checks, cards,
approvals, execution and audit as a chat call (agent/gate/), for a caller whose model's
context we cannot see. Exported by the chat door (agent/chat/__init__.py).

Interface (all the adapter needs):

    GatedCalls.tools_for(caller) -> list[Tool]
        The catalog tools the caller may call in at least one environment, as the sidecar
        says (`/v1/permissions` per environment with the caller's token, kept a few seconds:
        agent/chat/gated_tools.py), in the catalog's order, but an upstream tool in
        quarantine. A refused token: UNAUTHORIZED; no sidecar: POLICY_UNAVAILABLE.
    GatedCalls.call(caller, name, arguments, *, can_elicit, request_state=None,
                    confirm=None) -> CallOutcome
        One `tools/call` (agent/chat/gated_outcomes.py has the outcomes):
        - a name the catalog does not have: Refused INVALID_REQUEST; arguments that fail its
          schema (an environment it needs missing among them): Refused INVALID_REQUEST;
        - the sidecar's deny, also for a catalog tool `tools_for` leaves out: Refused
          FORBIDDEN with `required_role` and `alternatives` ([{action, prompt}]);
        - a read: run at once, Done (or Failed, with chat's `tool_error` reason if any);
        - every write needs a card: an MCP call is untrusted. A card only that requires (the
          policy would run the call without one) is asked inline when `can_elicit`:
          AskInline; the retry with `request_state` and `confirm` "accept" re-checks and runs
          it once (Done or Failed), "decline" or "cancel" runs nothing (Denied). A replayed,
          expired, altered or another user's `request_state`, or one for other arguments,
          runs nothing: Refused (STALE_CONFIRMATION, NO_PENDING_CONFIRMATION).
        - a card the catalog or the policy requires (a `confirm_in` environment, a
          destructive tool), any card when the client cannot elicit, and every approval by
          someone else (four eyes) are answered by a person: the call is stored, Pending
          (`confirmation_required` or `approval_required`, `approve_url` the panel page).
          A stored call (inline too) counts against its user's `pending_cap` until answered
          or expired: over it, Refused RATE_LIMITED (`retry_after`), nothing stored.
    GatedCalls.answer(user, user_jwt, call_id, decision, args_digest) -> CallStatus
        The requester's answer on the page (REST `POST /api/agent/calls/{call_id}`):
        `confirm` re-checks with their token of now and runs the call once, `deny` cancels.
        Their own confirmation of an approval is FORBIDDEN (someone else approves it, in the
        approvals inbox: agent/chat/approvals.py, `approval_id` = `call_id`); a digest not the
        call's: STALE_CONFIRMATION; a call no longer pending: NO_PENDING_CONFIRMATION.
    GatedCalls.result(sub, call_id) -> CallStatus
        What became of a stored call: pending, running, done (with ss-tools' answer),
        denied, expired, failed. Anyone but its requester: NOT_FOUND (the SQL names the
        owner: nobody else learns that it exists).
    GatedCalls.pending(sub) -> list[CallStatus]: the requester's calls waiting for an answer

A stored call runs once: its claim is a conditional update (pending -> running) that one
answer wins (agent/storage/gated_call_rows.py), its request carries the call's id as
Idempotency-Key, sent by the gate (agent/gate/execution.py). No run, so no takeover: a
replica dying mid-call leaves it `running`; ss-tools' audit says by its key if it ran.

Audit: one record per call, keyed by the call's id as both its conversation and its call
(`turn_id` "mcp"; the calls table names its owner): the check's decision (channel `mcp`,
the token's `azp`, the client's name and version marked unverified), the card, each answer
(inline, on the page, or the approvers'), the execution or why it did not run.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from agentchat.agent.audit.trail import AuditTrail, card_shown
from agentchat.agent.chat.gated_cards import (
    APPROVAL,
    CONFIRMATION,
    INLINE,
    INLINE_TTL_S,
    TURN_ID,
    StateSeal,
    answer_rows,
    approve_url,
    card_of,
    client_of,
    denial,
    rows_for,
    status_of,
    who_answers,
)
from agentchat.agent.chat.gated_outcomes import (
    Answer,
    AskInline,
    Caller,
    CallOutcome,
    CallStatus,
    Denied,
    Done,
    Failed,
    Pending,
    Refused,
    failure_reason,
)
from agentchat.agent.chat.gated_tools import ToolLists
from agentchat.agent.gate.audit_rows import CallAudit
from agentchat.agent.gate.checks import MCP_CLIENT, REFUSED, Gate
from agentchat.agent.gate.execution import CHANGED_TEXT, Execution, JudgedCall
from agentchat.agent.storage import approvals as approval_records
from agentchat.agent.storage import gated_call_rows as calls
from agentchat.agent.storage import grants as grant_records
from agentchat.agent.storage import outbox
from agentchat.agent.storage.db import Db, Row, connection
from agentchat.catalog import Tool
from agentchat.catalog_source import CatalogSource
from agentchat.digest import args_digest
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal
from agentchat.tool_request import InvalidArguments, validate_arguments

CALL_ID = re.compile(r"^mcp-[0-9a-f-]{36}$")
DENIED_WORDS = {"decline": "declined", "cancel": "cancelled", "deny": "denied"}
ANY_ASK = [INLINE, CONFIRMATION, APPROVAL]
NO_SUCH_CALL = "no such call"  # missing and another user's alike


class GatedCalls:
    def __init__(self, *, pool: Db, gate: Gate, execution: Execution, catalogs: CatalogSource,
                 audit: AuditTrail | None, states: StateSeal, public_url: str,
                 confirmation_ttl_s: float, pending_cap: int = 20,
                 tools_cache_s: float = 2.0, tools_cache_size: int = 10_000) -> None:
        self.pool = pool
        self.gate = gate
        self.execution = execution
        self.catalogs = catalogs
        self.audit = audit
        self.states = states
        self.public_url = public_url
        self.confirmation_ttl_s = confirmation_ttl_s
        self.pending_cap = pending_cap
        self.tool_lists = ToolLists(gate.policy, ttl_s=tools_cache_s, size=tools_cache_size)
        # Calls running on this replica: shielded from their request's cancel, kept here.
        self._running: set[asyncio.Future[CallOutcome]] = set()

    async def tools_for(self, caller: Caller) -> list[Tool]:
        catalog = self.catalogs.current()
        names = await self.tool_lists.allowed(caller, catalog)
        return [t for t in catalog.tools if t.name in names and self.gate.offered(t)]

    # -- a call -------------------------------------------------------------------------

    async def call(self, caller: Caller, name: str, arguments: dict[str, Any], *,
                   can_elicit: bool, request_state: str | None = None,
                   confirm: Answer | None = None) -> CallOutcome:
        catalog = self.catalogs.current()
        tool = catalog.get(name)
        if tool is None:
            return Refused(ErrorCode.INVALID_REQUEST, f"there is no tool named {name[:100]!r}")
        if request_state is not None or confirm is not None:
            return await self._inline_answer(caller, tool, arguments, request_state, confirm)
        call_id = f"mcp-{uuid.uuid4()}"
        client = client_of(caller)
        rows = rows_for(self.audit, call_id, caller.sub, client)
        try:
            d, args = await self._judge(caller.sub, caller.user_jwt, tool, arguments)
        except AgentChatError as e:
            await rows.append(rows.not_run(call_id, name, arguments, "policy_unavailable"
                                           if e.code is ErrorCode.POLICY_UNAVAILABLE
                                           else "refused", str(e.code)))
            return Refused(e.code, e.detail)
        await rows.append(rows.decision(call_id, name, args or arguments, d, MCP_CLIENT))
        if d.get("decision") == REFUSED or args is None:
            return Refused.by_gate(d)
        if d.get("decision") == "deny":
            await rows.append(rows.not_run(call_id, name, args, "permission_denied", None))
            role, alternatives = denial(catalog, name, d, caller.lang)
            return Refused(ErrorCode.FORBIDDEN, f"you may not run “{tool.title.en}”"
                           + (f": it needs the {role} role" if role else ""),
                           required_role=role, alternatives=alternatives)
        if d.get("decision") == "allow":  # a read: a write always has a card here
            return await self._run(rows, tool, args, d, caller.user_jwt, call_id)
        return await self._ask(caller, client, call_id, tool, args, d, can_elicit)

    async def _judge(self, sub: str, user_jwt: str, tool: Tool, arguments: Any
                     ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The gate, as for a chat call: every MCP call is untrusted, and the requester's
        grants stand in for someone else's approval (never for the untrusted card)."""
        async def grants(tool_name: str, env: str | None, key: str) -> str | None:
            return await grant_records.covering_requester(self.pool, sub, tool_name, env, key)

        return await self.gate.judge(tool.name, arguments, offered={tool.name},
                                     user_jwt=user_jwt, taint=MCP_CLIENT,
                                     catalog=self.catalogs.current(), grants=grants)

    async def _ask(self, caller: Caller, client: dict[str, Any], call_id: str, tool: Tool,
                   args: dict[str, Any], d: dict[str, Any], can_elicit: bool) -> CallOutcome:
        """The call stored and its card asked: inline, or of a person on the page."""
        ask = who_answers(tool, d, can_elicit)
        digest = args_digest(args)
        state = self.states.make(sub=caller.sub, tool=tool.name, args_digest=digest,
                                 call_id=call_id) if ask == INLINE else None
        if ask == INLINE and state is None:
            ask = CONFIRMATION  # no key to seal a request_state with: a person answers
        ttl = INLINE_TTL_S if ask == INLINE else self.confirmation_ttl_s
        card = {**card_of(call_id, tool, args, d, caller,
                          datetime.now(UTC) + timedelta(seconds=ttl)), "asked": ask}
        expires_at = datetime.fromisoformat(card["expires_at"])
        async with connection(self.pool) as conn, conn.transaction():
            stored = await calls.add(conn, call_id=call_id, owner=caller.sub, tool=tool.name,
                                     environment=d.get("env_context"), arguments=args,
                                     args_digest=digest, ask=ask, card=card, client=client,
                                     expires_at=expires_at, cap=self.pending_cap)
            if stored and ask == APPROVAL:
                await approval_records.add_gated_approval(
                    conn, approval_id=call_id, requester=caller.sub, card=card,
                    rule=card["approval"]["policy_rule"], expires_at=expires_at)
                await outbox.enqueue(conn, call_id, "approval_requested")
        if not stored:
            return await self._over_quota(caller.sub, client, call_id, tool.name, args)
        if self.audit is not None and self.audit.enabled:
            await card_shown(self.pool, conversation_id=call_id, turn_id=TURN_ID, card=card)
        risk, env = str(card["risk"]), d.get("env_context")
        if state is not None:
            return AskInline(call_id=call_id, prompt=card["prompt"], reason=card["reason"],
                             title=card["title"], risk=risk, environment=env,
                             request_state=state, expires_at=card["expires_at"])
        return Pending(status="approval_required" if ask == APPROVAL
                       else "confirmation_required", call_id=call_id,
                       approve_url=approve_url(self.public_url, call_id),
                       expires_at=card["expires_at"], prompt=card["prompt"], risk=risk,
                       environment=env, args_digest=digest, approval=card["approval"],
                       title=card["title"])

    async def _over_quota(self, sub: str, client: dict[str, Any], call_id: str, tool: str,
                          args: dict[str, Any]) -> Refused:
        rows = rows_for(self.audit, call_id, sub, client)  # its record: why it did not run
        await rows.append(rows.not_run(call_id, tool, args, "rate_limited", "pending_cap"))
        return Refused(ErrorCode.RATE_LIMITED, f"you have {self.pending_cap} calls waiting for "
                       "an answer; answer or cancel one first (nothing was stored)",
                       retry_after=await calls.freed_in(self.pool, sub))

    async def _inline_answer(self, caller: Caller, tool: Tool, arguments: Any,
                             request_state: str | None, confirm: Answer | None) -> CallOutcome:
        """The client's retry with its user's answer: the state must be this user's, this
        tool's and these arguments', unaltered, unexpired, and its call still pending."""
        if request_state is None or confirm not in ("accept", "decline", "cancel"):
            return Refused(ErrorCode.INVALID_REQUEST,
                           "request_state goes with an answer: accept, decline or cancel")
        try:
            digest = args_digest(validate_arguments(tool, arguments))
            call_id = self.states.open(request_state, sub=caller.sub, tool=tool.name,
                                       args_digest=digest)
        except (InvalidArguments, ValueError) as e:
            return Refused(ErrorCode.STALE_CONFIRMATION, f"{e}; nothing ran")
        row = await calls.get(self.pool, call_id, caller.sub)
        if row is None or row["status"] != "pending":
            return Refused(ErrorCode.NO_PENDING_CONFIRMATION,
                           f"this call was answered already ({row['status'] if row else 'gone'})"
                           "; nothing ran", call_id=call_id)
        return await self._settle(row, caller.user_jwt, "mcp_elicitation",
                                  "confirm" if confirm == "accept" else confirm, [INLINE])

    # -- the requester's answer on the page; an approver's ------------------------------

    async def answer(self, user: Principal, user_jwt: str, call_id: str, decision: str,
                     args_digest: str) -> CallStatus:
        row = (await calls.get(self.pool, call_id, user.sub)
               if CALL_ID.match(call_id) else None)
        if row is None:
            raise AgentChatError(ErrorCode.NOT_FOUND, NO_SUCH_CALL)
        if args_digest != row["args_digest"]:
            raise AgentChatError(ErrorCode.STALE_CONFIRMATION,
                                 "args_digest is not the call's: the card is for other arguments")
        if row["status"] != "pending":
            raise AgentChatError(ErrorCode.NO_PENDING_CONFIRMATION,
                                 f"this call is no longer pending ({row['status']})")
        if row["ask"] == APPROVAL and decision == "confirm":
            raise AgentChatError(ErrorCode.FORBIDDEN,
                                 "someone else must approve this; you may only cancel it")
        outcome = await self._settle(row, user_jwt, "panel", decision, ANY_ASK)
        if isinstance(outcome, Refused) and outcome.code is not ErrorCode.FORBIDDEN:
            raise AgentChatError(outcome.code, outcome.detail)  # nothing settled
        return await self.result(user.sub, call_id)

    async def on_approval(self, row: Row, token: str, decided: str,
                          checks: dict[str, dict[str, Any]]) -> None:
        """An approval of a stored call decided (agent/chat/approvals.py, which checked
        the approver, recorded the answers and told the inbox): denied runs nothing,
        approved runs it once under the approver's token, as a chat approval does."""
        call = await calls.get_any(self.pool, str(row["approval_id"]))
        if call is None:
            return
        rows = rows_for(self.audit, str(call["call_id"]), str(call["owner"]), call["client"])
        if decided != "approved":
            await self._close(rows, call, "denied", "approval")
            return
        check = checks.get(str(call["call_id"])) or next(iter(checks.values()), {})
        claimed = await calls.claim(self.pool, call_id=str(call["call_id"]),
                                    owner=str(call["owner"]), args_digest=call["args_digest"],
                                    asks=[APPROVAL], decision_id=check.get("decision_id"))
        tool = self.catalogs.current().get(str(call["tool"]))
        if claimed is None or tool is None:
            return
        await self._run(rows, tool, dict(call["arguments"]), check, token,
                        str(call["call_id"]), stored=True)

    async def _settle(self, row: Row, user_jwt: str, channel: str, decision: str,
                      asks: list[str]) -> CallOutcome:
        """The requester's answer: deny (or decline, cancel) settles it, a confirm re-checks
        with their token of now and runs it once."""
        call_id, owner = str(row["call_id"]), str(row["owner"])
        rows = rows_for(self.audit, call_id, owner, row["client"])
        tool = self.catalogs.current().get(str(row["tool"]))
        recheck: dict[str, Any] | None = None
        result, reason = "denied", "denied"
        if decision == "confirm" and tool is not None:
            try:
                recheck, _ = await self._judge(owner, user_jwt, tool, row["arguments"])
            except AgentChatError as e:
                return Refused(e.code, e.detail, call_id=call_id)
            allowed = recheck.get("decision") == "allow_with_confirmation" and (
                (recheck.get("approval") or {}).get("mode") != "other")
            # The client's own answer stands only for the card the untrusted context alone
            # requires; the requester's answer on the page for any card of their own.
            if allowed and (channel != "mcp_elicitation"
                            or who_answers(tool, recheck, True) == INLINE):
                result = "confirmed"
            else:
                reason = "revoked"
        claimed = await calls.claim(
            self.pool, call_id=call_id, owner=owner, args_digest=row["args_digest"],
            asks=asks, to="running" if result == "confirmed" else "denied",
            decision_id=(recheck or {}).get("decision_id"))
        if claimed is None:
            return Refused(ErrorCode.NO_PENDING_CONFIRMATION,
                           "this call was answered already; nothing ran", call_id=call_id)
        entries = answer_rows(rows, row, recheck, channel, decision, result)
        if result != "confirmed":
            entries += rows.not_run(call_id, str(row["tool"]), row["arguments"], reason,
                                    decision)
        await rows.append(entries)
        if result != "confirmed" or tool is None or recheck is None:
            if reason == "revoked" and recheck is not None:
                role, alternatives = denial(self.catalogs.current(), str(row["tool"]),
                                            recheck, "en")
                return Refused(ErrorCode.FORBIDDEN, "the policy of now does not let this call "
                               "run on this answer; nothing ran", required_role=role,
                               alternatives=alternatives, call_id=call_id)
            return Denied(call_id, f"{DENIED_WORDS.get(decision, 'denied')}; nothing ran")
        return await self._run(rows, tool, dict(row["arguments"]), recheck, user_jwt, call_id,
                               stored=True)

    async def _close(self, rows: CallAudit, call: Row, reason: str, detail: str) -> None:
        closed = await calls.claim(self.pool, call_id=str(call["call_id"]),
                                   owner=str(call["owner"]), args_digest=call["args_digest"],
                                   asks=ANY_ASK, to="denied")
        if closed is not None:
            await rows.append(rows.not_run(str(call["call_id"]), str(call["tool"]),
                                           call["arguments"], reason, detail))

    # -- running once ---------------------------------------------------------------------

    async def _run(self, rows: CallAudit, tool: Tool, args: dict[str, Any],
                   d: dict[str, Any], user_jwt: str, call_id: str, *,
                   stored: bool = False) -> CallOutcome:
        """Run a judged call once (its id as Idempotency-Key for a write) and, when stored,
        record its end. Shielded: a caller that goes away does not stop a call that may have
        been sent; it ends and its row says how."""
        judged = JudgedCall(call_id, tool.name, args, d.get("catalog_revision"),
                            d.get("decision_id"), call_id if tool.risk != "read" else None)
        task = asyncio.ensure_future(self._execute(rows, judged, user_jwt, stored))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await asyncio.shield(task)

    async def _execute(self, rows: CallAudit, judged: JudgedCall, user_jwt: str,
                       stored: bool) -> CallOutcome:
        catalog = self.catalogs.current()
        call_id = judged.call_id if stored else None
        if self.execution.changed(judged, catalog):
            await self.execution.record_changed(rows, judged)
            if stored:
                await calls.finish(self.pool, judged.call_id, "failed", error=CHANGED_TEXT)
            return Failed(call_id, CHANGED_TEXT, ErrorCode.POLICY_UNAVAILABLE)
        events: list[dict[str, Any]] = []  # no stream: kept for the failure's reason
        try:
            outcome = await self.execution.run(rows, judged, catalog=catalog,
                                               user_jwt=user_jwt, lang="en",
                                               emit=events.append)
        except BaseException:
            if stored:
                await calls.finish(self.pool, judged.call_id, "failed",
                                   error="the call failed while it ran; it may have run")
            raise
        if stored:
            await calls.finish(self.pool, judged.call_id,
                               "done" if outcome.status == "ok" else "failed",
                               result=outcome.output, error=outcome.error)
        if outcome.status == "ok":
            return Done(outcome.output, call_id)
        return Failed(call_id, outcome.error or outcome.status, reason=failure_reason(events))

    # -- reading ------------------------------------------------------------------------

    async def result(self, sub: str, call_id: str) -> CallStatus:
        row = await calls.get(self.pool, call_id, sub) if CALL_ID.match(call_id) else None
        if row is None:
            raise AgentChatError(ErrorCode.NOT_FOUND, NO_SUCH_CALL)
        return status_of(row, self.public_url)

    async def pending(self, sub: str) -> list[CallStatus]:
        return [status_of(r, self.public_url) for r in await calls.pending(self.pool, sub)]
