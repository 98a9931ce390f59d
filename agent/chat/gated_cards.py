"""An MCP call's card: who answers it, its words and stored payload, its sealed
`request_state`, and where its audit rows go (agent/chat/gated_calls.py has the rules).

The stored card has the fields of a chat card (`confirm_required`, docs/protocol.md §2), so an
approval of a stored call reads like any other in the inbox, the notices and the REST
approvals (agent/chat/approvals.py, agent/storage/approvals.py); `channel` says where it came
from and `untrusted_source` is always `mcp_client`.

`request_state` is sealed (Fernet under the run tokens' keys, with its own HKDF info:
agent/storage/sealing.py) and holds the user, the tool, the arguments' digest, the call id and
its expiry; it opens only unaltered, within five minutes, and the call it names is settled
once (agent/storage/gated_call_rows.py `claim`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agentchat.agent.audit.store import Entry
from agentchat.agent.audit.trail import AuditTrail, decision_detail
from agentchat.agent.chat.gated_outcomes import Caller, CallStatus
from agentchat.agent.gate.audit_rows import CallAudit
from agentchat.agent.gate.checks import MCP_CLIENT, UNTRUSTED_CARD
from agentchat.agent.graph.calls import localized_alternatives
from agentchat.agent.graph.cards import approval_of
from agentchat.agent.storage.db import Row
from agentchat.agent.storage.sealing import TokenSeal
from agentchat.catalog import Catalog, Tool
from agentchat.words import Lang, pick

STATE_INFO = b"agentchat mcp request_state v1"
STATE_VERSION = 1
INLINE_TTL_S = 300  # an inline card's life, and its request_state's
CALLS_PAGE = "/api/agent/ui/calls/"  # the requester's page for a stored call
TURN_ID = "mcp"  # the audit rows' turn of a call outside a conversation

INLINE, CONFIRMATION, APPROVAL = "inline", "confirmation", "approval"


def who_answers(tool: Tool, d: dict[str, Any], can_elicit: bool) -> str:
    """inline: a card only the untrusted context requires, and the client can ask; approval:
    someone else's (four eyes); confirmation: the requester, on the page."""
    if (d.get("approval") or {}).get("mode") == "other":
        return APPROVAL
    own_only = (d.get("reason_code") == UNTRUSTED_CARD
                and not tool.needs_card(d.get("env_context")))
    return INLINE if own_only and can_elicit else CONFIRMATION


def mcp_reason(lang: Lang) -> str:
    return pick(lang, "Действие запросил внешний агент (MCP-клиент), чей контекст AgentChat не "
                      "видит: подтвердите его сами.",
                "An outside agent (an MCP client) asked for this action, and AgentChat cannot "
                "see its context: confirm it yourself.")


def card_of(call_id: str, tool: Tool, args: dict[str, Any], d: dict[str, Any],
            caller: Caller, expires_at: datetime) -> dict[str, Any]:
    """The stored card, a chat card's shape (approval, prompt, risk) plus where it came from."""
    approval = approval_of(call_id, d)
    return {
        "confirm_id": call_id, "thread_id": call_id,
        "call_id": call_id, "tool_name": tool.name, "title": tool.title_in(caller.lang),
        "tool_args": args, "risk": d.get("risk") or tool.risk,
        "risk_level": d.get("risk_level"), "dangerous": bool(d.get("dangerous")),
        "env_context": d.get("env_context"), "permission_granted": True,
        "required_role": None, "alternatives": None,
        "prompt": tool.card_prompt(args, caller.lang), "reason_code": d.get("reason_code"),
        "reason": mcp_reason(caller.lang),
        "expires_at": (datetime.fromisoformat(approval["expires_at"]) if approval is not None
                       else expires_at).isoformat(),
        "approval": approval, "calls": None, "channel": "mcp",
        "untrusted_source": MCP_CLIENT,
    }


def client_of(caller: Caller) -> dict[str, Any]:
    """What the audit and the calls table keep of the client: the token's `azp`, and what the
    client says of itself, marked unverified."""
    return {"azp": caller.azp, "name": caller.client_name, "version": caller.client_version,
            "verified": False}


def rows_for(audit: AuditTrail | None, call_id: str, owner: str,
             client: dict[str, Any]) -> CallAudit:
    """An MCP call's own audit record: its id as the conversation and the call."""
    return CallAudit(audit, call_id, TURN_ID, "mcp", owner=owner,
                     about={"azp": client.get("azp"), "client": {
                         "name": client.get("name"), "version": client.get("version"),
                         "verified": False}})


def answer_rows(rows: CallAudit, row: Row, recheck: dict[str, Any] | None, channel: str,
                action: str, result: str) -> list[Entry]:
    """A stored call's answer on its record: the re-check's decision, then the answer
    (`channel`: mcp_elicitation, or panel for the requester's page)."""
    ref = rows.ref(str(row["call_id"]), str(row["tool"]), row["arguments"])
    if ref is None:
        return []
    out = []
    if recheck is not None and recheck.get("decision_id"):
        out.append(ref.entry("decision", {**decision_detail(
            recheck, kind="recheck", taint=MCP_CLIENT), **rows.about, "channel": "mcp"}))
    out.append(ref.entry("answer", {"confirm_id": row["call_id"], "by": row["owner"],
                                    "channel": channel, "action": action, "result": result}))
    return out


def denial(catalog: Catalog, tool: str, d: dict[str, Any],
           lang: Lang) -> tuple[str | None, list[dict[str, str]]]:
    """A denial's role and alternatives, in the catalog's words (the chat's denial card's)."""
    return (d.get("required_role"),
            localized_alternatives(catalog, tool, d.get("alternatives"), lang))


@dataclass(frozen=True)
class StateSeal:
    seal: TokenSeal

    def make(self, *, sub: str, tool: str, args_digest: str, call_id: str) -> str | None:
        """The sealed state; None without a key (then no card is asked inline)."""
        return self.seal.seal_json({"v": STATE_VERSION, "sub": sub, "tool": tool,
                                    "args_digest": args_digest, "call_id": call_id,
                                    "exp": int(time.time()) + INLINE_TTL_S})

    def open(self, sealed: str, *, sub: str, tool: str, args_digest: str) -> str:
        """The call id the state names, when it is this user's, this tool's and these
        arguments', unaltered and unexpired; ValueError otherwise."""
        payload = self.seal.open_json(sealed, max_age_s=INLINE_TTL_S)
        if payload.get("v") != STATE_VERSION or not isinstance(payload.get("call_id"), str):
            raise ValueError("not a request_state")
        if (payload.get("sub"), payload.get("tool"), payload.get("args_digest")) != (
                sub, tool, args_digest):
            raise ValueError("the request_state is for another user, tool or arguments")
        if not isinstance(payload.get("exp"), int) or payload["exp"] < time.time():
            raise ValueError("the request_state expired")
        return str(payload["call_id"])


def status_of(row: Row, public_url: str) -> CallStatus:
    card = row.get("card") or {}
    return CallStatus(
        call_id=str(row["call_id"]), status=row["status"], tool=str(row["tool"]),
        environment=row.get("environment"), args_digest=str(row["args_digest"]),
        ask=str(row["ask"]), prompt=str(card.get("prompt") or ""),
        expires_at=_iso(row["expires_at"]), result=row.get("result"),
        error=row.get("error"), created_at=_iso(row.get("created_at")),
        approve_url=approve_url(public_url, str(row["call_id"])))


def approve_url(public_url: str, call_id: str) -> str:
    return public_url.rstrip("/") + CALLS_PAGE + call_id


def inline_expiry() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=INLINE_TTL_S)


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value or "")
