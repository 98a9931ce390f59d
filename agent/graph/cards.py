"""A card's words and payload (the `confirm_required` event, docs/protocol.md §2): what the
owner approves in the turn's language, from the catalog, the validated arguments and the
object names ss-tools results carry (agent/graph/names.py); and the ToolMessages of calls
that do not run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import ToolMessage

from agentchat.agent.gate.checks import FORKED_CARD, UNTRUSTED_CARD
from agentchat.agent.gate.tool_runtime import tool_title
from agentchat.agent.graph.calls import localized_alternatives
from agentchat.agent.graph.names import names_for_call
from agentchat.agent.graph.state import TurnRuntime
from agentchat.agent.graph.taint import own_result, taint_reason
from agentchat.catalog import Catalog
from agentchat.digest import calls_digest
from agentchat.words import Lang, pick


@dataclass(frozen=True)
class CardWords:
    """What a card's words come from: the catalog, the turn (its language, UIContext), and
    the object names the thread's ss-tools results carry."""

    catalog: Catalog
    ctx: TurnRuntime
    names: dict[tuple[str, str], str]

    def prompt(self, call: Any, d: dict[str, Any], granted: bool) -> str:
        lang, tool = self.ctx.lang, self.catalog.get(call["name"])
        if tool is None:  # the policy node refuses these; never a card, but never raw words
            return pick(lang, "Подтвердить неизвестное действие?", "Confirm an unknown action?")
        if granted:
            names = names_for_call(call["args"], self.names, self.ctx.turn.uicontext)
            return tool.card_prompt(call["args"], lang, names)
        env = d.get("env_context")
        where = "" if not env or env not in self.catalog.environments else (
            pick(lang, f" в {env}", f" in {env}"))
        role = str(d.get("required_role") or "")
        role = role if role.replace("-", "").replace("_", "").isalnum() else ""
        need = pick(lang, f": нужна роль {role}", f": it needs the {role} role") if role else ""
        return pick(lang, f"Недостаточно прав на «{tool.title.ru}»{where}{need}.",
                    f"You may not run “{tool.title.en}”{where}{need}.")

    def alternatives(self, call: Any, d: dict[str, Any]) -> list[dict[str, str]]:
        return localized_alternatives(self.catalog, call["name"], d.get("alternatives"),
                                      self.ctx.lang)


def permission_denied(call: Any, d: dict[str, Any], words: CardWords) -> ToolMessage:
    return own_result(json.dumps({"permission_denied": True,
                                  "required_role": d.get("required_role"),
                                  "alternatives": words.alternatives(call, d)},
                                 ensure_ascii=False),
                      tool_call_id=call["id"] or "", name=call["name"])


def refusal(call: Any, text: str) -> ToolMessage:
    return own_result(text, tool_call_id=call["id"] or "", name=call["name"])


# Where an approver answers (docs/protocol.md §11): the panel's approvals page, under the agent's
# prefix.
APPROVE_PATH = "/api/agent/ui/approvals/"
MAX_APPROVAL_S = 7 * 24 * 3600


def approval_of(confirm_id: str, d: dict[str, Any]) -> dict[str, Any] | None:
    """The card's `approval` (docs/protocol.md §11) when the policy says someone else answers
    it: its id is the card's, its expiry the policy's (at most 7 days), not the card TTL."""
    rule = d.get("approval")
    if d.get("decision") == "deny" or not isinstance(rule, dict) or rule.get("mode") != "other":
        return None
    ttl = min(float(rule.get("expires_after_s") or 4 * 3600), MAX_APPROVAL_S)
    return {
        "mode": "other", "approval_id": confirm_id,
        "approvers": list(rule.get("approvers") or []), "quorum": int(rule.get("quorum") or 1),
        "expires_at": (datetime.now(UTC) + timedelta(seconds=ttl)).isoformat(),
        "approve_url": APPROVE_PATH + confirm_id,
        "args_digest": d.get("args_digest"),
        "policy_rule": {"rule": rule.get("rule"),
                        "escalate_after_s": rule.get("escalate_after_s"),
                        "grant_max_minutes": rule.get("grant_max_minutes") or 0},
    }


def card_payload(confirm_id: str, words: CardWords, call: Any, d: dict[str, Any]) -> dict[str, Any]:
    ctx = words.ctx
    granted = d.get("decision") != "deny"
    approval = approval_of(confirm_id, d)
    expires = (datetime.fromisoformat(approval["expires_at"]) if approval is not None
               else datetime.now(UTC) + timedelta(seconds=ctx.confirmation_ttl_s))
    tool, env = call["name"], d.get("env_context")
    return {
        "type": "confirm_required",
        "confirm_id": confirm_id,
        "thread_id": ctx.conversation_id,
        "call_id": call["id"],
        "tool_name": tool,
        "title": tool_title(words.catalog, tool, ctx.lang),
        "tool_args": call["args"],
        "risk": d.get("risk"),
        "risk_level": d.get("risk_level"),
        "dangerous": bool(d.get("dangerous")),
        "env_context": env,
        "permission_granted": granted,
        "required_role": None if granted else d.get("required_role"),
        "alternatives": None if granted else words.alternatives(call, d),
        # What the owner approves: the catalog's words, the validated arguments, quoted names.
        "prompt": words.prompt(call, d, granted),
        # Why a card: `confirmation_required`, `confirmation_required_untrusted` (text from
        # outside the user's words is in the model's context), `confirmation_required_forked`
        # (a fork after a write), or the denial's reason; for the agent's own two, `reason`
        # says why in the turn's language.
        "reason_code": d.get("reason_code"),
        "reason": own_reason(d, ctx.lang),
        "expires_at": expires.isoformat(),
        # Set when someone else must approve (mode `other`): the requester only cancels.
        "approval": approval,
        # A batched card's calls (`batch_payload`); null on a card of one call.
        "calls": None,
    }


FORK_REASON = {
    "ru": ("Разговор вернулся к более раннему сообщению, а в другой его ветке уже выполнялись "
           "(или могли выполниться) изменения: подтвердите это действие сами."),
    "en": ("The conversation went back to an earlier message, and its other branch already "
           "ran (or may have run) changes: confirm this action yourself."),
}


def own_reason(d: dict[str, Any], lang: Lang) -> str | None:
    """Why the agent asks a card the policy would not: an untrusted context, a fork."""
    if d.get("reason_code") == UNTRUSTED_CARD:
        return taint_reason(d.get("untrusted_source"), lang)
    if d.get("reason_code") == FORKED_CARD:
        return FORK_REASON[lang]
    return None


def batch_payload(confirm_id: str, words: CardWords,
                  asked: list[tuple[Any, dict[str, Any], str]]) -> dict[str, Any]:
    """One card for several calls of one model message (docs/protocol.md §11): the first call's
    card, as an old client reads it, plus `calls` (each with its own confirm_id, the
    Idempotency-Key it runs with). For someone else's approval one `args_digest` binds every
    listed call: the digest of the list of per-call digests, in the card's order."""
    first_call, first_d, _ = asked[0]
    card = card_payload(confirm_id, words, first_call, first_d)
    card["calls"] = [{
        "call_id": call["id"], "confirm_id": cid, "tool_name": call["name"],
        "title": tool_title(words.catalog, call["name"], words.ctx.lang),
        "prompt": words.prompt(call, d, d.get("decision") != "deny"),
        "arguments": call["args"], "risk": d.get("risk"), "env_context": d.get("env_context"),
        "args_digest": d.get("args_digest")} for call, d, cid in asked]
    if card["approval"] is not None:
        card["approval"]["args_digest"] = calls_digest([c["args_digest"] for c in card["calls"]])
    return card


def batch_key(d: dict[str, Any], call_id: str) -> tuple[Any, ...]:
    """Which carded calls share a card: those whose card would say the same thing around
    them. The same reason (a card of the catalog's, or an untrusted context's) and the same
    answerer (the requester, or someone else under the same rule and environment); a card
    the user may only close (permission denied) stays a card of its own."""
    if d.get("decision") == "deny":
        return ("alone", call_id)
    approval = d.get("approval")
    if isinstance(approval, dict) and approval.get("mode") == "other":
        return ("other", d.get("reason_code"), approval.get("rule"), d.get("env_context"))
    return ("self", d.get("reason_code"))
