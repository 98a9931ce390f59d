"""The confirm node's steps: each call's verdict (run it, with which idempotency key and
decision, or answer it with a refusal) and the card an `interrupt()` shows for the calls that
need a person. No side effects before the interrupt: the node re-runs from its start on
every resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt
from opentelemetry import trace

from agentchat.agent.graph.cards import CardWords, card_payload, permission_denied, refusal
from agentchat.agent.graph.state import (
    EXPIRED,
    REFUSED,
    confirm_id_for,
    idempotency_key_for,
)

TRACER = trace.get_tracer("agentchat.agent")


@dataclass
class Verdicts:
    """What the confirm node decided so far: the calls to run (with their keys), the
    ToolMessages of the others, and whether a card expired (then nothing runs)."""

    approved: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # call_id -> Idempotency-Key
    decision_ids: dict[str, str] = field(default_factory=dict)  # call_id -> decision in force
    revisions: dict[str, str] = field(default_factory=dict)  # call_id -> catalog revision judged
    refused: list[ToolMessage] = field(default_factory=list)
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)  # the audit's words
    expired: bool = False

    def approve(self, call_id: str, key: str, decision: dict[str, Any]) -> None:
        """`decision`: the one in force (a confirmed card's re-check, else the check)."""
        self.approved.append(call_id)
        self.keys[call_id] = key
        if isinstance(decision.get("decision_id"), str):
            self.decision_ids[call_id] = decision["decision_id"]
        if isinstance(decision.get("catalog_revision"), str):
            self.revisions[call_id] = decision["catalog_revision"]

    def refuse(self, call: Any, text: str, reason: str,
               message: ToolMessage | None = None) -> None:
        self.refused.append(message or refusal(call, text))
        self.reasons[call["id"] or ""] = (reason, text)


def confirm_call(call: Any, d: dict[str, Any], words: CardWords, out: Verdicts) -> None:
    """One call: refused and allowed calls as decided; any other asks the user on a card."""
    ctx = words.ctx
    call_id = call["id"] or ""
    if d.get("decision") == REFUSED:
        out.refuse(call, f"not run: {d.get('detail')}", "refused")
        return
    if d.get("decision") == "allow":
        out.approve(call_id, idempotency_key_for(ctx.conversation_id, ctx.turn_id, call_id), d)
        return
    cid = confirm_id_for(ctx.conversation_id, call_id)
    asked = d
    d, result, in_force = ask(cid, words, call, d)
    if d.get("decision") == "allow_with_confirmation" and result == "confirmed":
        out.approve(call_id, cid, in_force)
    elif result == "expired":
        out.refuse(call, EXPIRED, "expired")
        out.expired = True
    elif d.get("decision") == "deny":
        # A card the sidecar had allowed, denied by the re-check: the role went meanwhile.
        reason = "revoked" if asked.get("decision") != "deny" else "permission_denied"
        out.refuse(call, "not run: permission denied", reason,
                   permission_denied(call, d, words))
    else:
        out.refuse(call, "not run: the user denied it", "denied")


def ask(confirm_id: str, words: CardWords, call: Any,
         d: dict[str, Any]) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """The card as an `interrupt()`: the decision (as rechecked), the user's answer, and the
    decision in force (the re-check's when there was one: its id goes to ss-tools)."""
    ctx = words.ctx
    with TRACER.start_as_current_span("agentchat.card", record_exception=False,
                                      set_status_on_exception=False, attributes={
            "agentchat.confirm_id": confirm_id, "agentchat.tool": call["name"],
            "agentchat.environment": str(d.get("env_context") or ""),
            "agentchat.permission_granted": d.get("decision") != "deny",
            "agentchat.turn_id": ctx.turn_id}) as span:
        # Raises on the first run (the card is shown; the span ends there); returns the
        # answer on resume.
        answer = interrupt(card_payload(confirm_id, words, call, d))
        result = answer.get("result") if isinstance(answer, dict) else None
        recheck = answer.get("recheck") if isinstance(answer, dict) else None
        span.set_attribute("agentchat.result", str(result))
    if isinstance(recheck, dict) and recheck.get("decision") == "deny":
        # Confirmed, but the sidecar asked again with the user's current token said no.
        return recheck, "denied", recheck
    return d, result, recheck if isinstance(recheck, dict) else d
