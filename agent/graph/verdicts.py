"""The confirm node's steps: each call's verdict (run it, with which idempotency key and
decision, or answer it with a refusal) and the cards an `interrupt()` shows for the calls that
need a person: one card for the calls of one model message that need the same answer
(`cards_for`, docs/protocol.md §3). No side effects before the interrupt: the node re-runs from
its start on every resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt
from opentelemetry import trace

from agentchat.agent.gate.checks import REFUSED
from agentchat.agent.graph.cards import (
    CardWords,
    batch_key,
    batch_payload,
    card_payload,
    permission_denied,
    refusal,
)
from agentchat.agent.graph.state import EXPIRED, confirm_id_for, idempotency_key_for

TRACER = trace.get_tracer("agentchat.agent")
NOT_APPROVED = ("not run: it came with a call someone else approved, and their approval runs "
                "only that; ask again")


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
    # Someone else's approval answered a card of this pass (the run holds the approver's
    # token), and the calls that approval let run.
    by_approval: bool = False
    approved_by_other: set[str] = field(default_factory=set)

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

    def only_what_approvers_approved(self, calls: list[Any]) -> None:
        """After someone else's approval the run holds the approver's token, which serves
        the calls they approved and nothing else (docs/protocol.md §11): any other call of
        the message (confirmed by the requester, or needing no card) does not run."""
        for call in calls:
            call_id = call["id"] or ""
            if call_id in self.approved and call_id not in self.approved_by_other:
                self.approved.remove(call_id)
                for kept in (self.keys, self.decision_ids, self.revisions):
                    kept.pop(call_id, None)
                self.refuse(call, NOT_APPROVED, "not_approved")


def settle(call: Any, d: dict[str, Any], words: CardWords, out: Verdicts) -> bool:
    """A call decided without a card (refused, or allowed); False when it needs an answer."""
    ctx = words.ctx
    call_id = call["id"] or ""
    if d.get("decision") == REFUSED:
        out.refuse(call, f"not run: {d.get('detail')}", "refused")
        return True
    if d.get("decision") == "allow":
        out.approve(call_id, idempotency_key_for(ctx.conversation_id, ctx.turn_id, call_id), d)
        return True
    return False


def cards_for(carded: list[tuple[Any, dict[str, Any]]]) -> list[list[tuple[Any, dict[str, Any]]]]:
    """The carded calls of one model message as cards: those with the same `batch_key` share
    one, in the order of their first call."""
    groups: dict[tuple[Any, ...], list[tuple[Any, dict[str, Any]]]] = {}
    for call, d in carded:
        groups.setdefault(batch_key(d, call["id"] or ""), []).append((call, d))
    return list(groups.values())


def ask_card(group: list[tuple[Any, dict[str, Any]]], words: CardWords, out: Verdicts) -> None:
    """One card (an `interrupt()`) for a group of calls, then each call's verdict from its
    own answer. A batched answer carries `calls: {call_id: {result, recheck}}`; a call it
    leaves out is denied. Without `calls` (a card of one call) the answer is the call's."""
    ctx = words.ctx
    asked = [(call, d, confirm_id_for(ctx.conversation_id, call["id"] or ""))
             for call, d in group]
    call, d, confirm_id = asked[0]
    with TRACER.start_as_current_span("agentchat.card", record_exception=False,
                                      set_status_on_exception=False, attributes={
            "agentchat.confirm_id": confirm_id, "agentchat.tool": call["name"],
            "agentchat.calls": len(asked),
            "agentchat.environment": str(d.get("env_context") or ""),
            "agentchat.permission_granted": d.get("decision") != "deny",
            "agentchat.turn_id": ctx.turn_id}) as span:
        # Raises on the first run (the card is shown; the span ends there); returns the
        # answer on resume.
        answer = interrupt(card_payload(confirm_id, words, call, d) if len(asked) == 1
                           else batch_payload(confirm_id, words, asked))
        answer = answer if isinstance(answer, dict) else {}
        span.set_attribute("agentchat.result", str(answer.get("result")))
    by_other = bool(answer.get("approval"))  # answered by approvers (chat/card_answers.py)
    out.by_approval = out.by_approval or by_other
    per_call = answer.get("calls") if isinstance(answer.get("calls"), dict) else None
    for call, d, key in asked:
        if per_call is not None:
            own = per_call.get(call["id"] or "") or {"result": "denied"}
        elif len(asked) == 1 or answer.get("confirm_id") == key:
            own = answer
        else:
            # A batched card resumed with an answer of one call (a checkpoint paused on a card
            # of one call before batching): only that call was asked; never run the others.
            own = {"result": "denied"}
        _verdict(call, d, key, own, words, out)
        if by_other and (call["id"] or "") in out.approved:
            out.approved_by_other.add(call["id"] or "")


def _verdict(call: Any, asked: dict[str, Any], key: str, answer: dict[str, Any],
             words: CardWords, out: Verdicts) -> None:
    """One carded call's verdict from its answer: the result, and the re-check (the sidecar
    asked again with the token of the answer's time: its id goes to ss-tools)."""
    result, recheck = answer.get("result"), answer.get("recheck")
    d, in_force = asked, asked
    if isinstance(recheck, dict) and recheck.get("decision") == "deny":
        # Confirmed, but the sidecar asked again with the user's current token said no.
        d, result, in_force = recheck, "denied", recheck
    elif isinstance(recheck, dict):
        in_force = recheck
    if d.get("decision") == "allow_with_confirmation" and result == "confirmed":
        out.approve(call["id"] or "", key, in_force)
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
