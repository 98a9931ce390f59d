"""The gate's checks of one call, the same for every caller (the graph's policy node, the
MCP calls of agent/chat/gated_calls.py): an upstream tool not in quarantine
(agent/gate/upstream_pins.py), the tool known and offered, its arguments valid against the
catalog's schema (an environment argument among them: required where the tool takes one),
then the sidecar with both tokens on exactly those arguments, then the agent's own card rule
(a write in an untrusted context, or in a fork after a write, needs the requester's card
whatever the policy says) and a time-boxed grant standing in for someone else's approval
(docs/protocol.md §11).

The answer is the decision dict every caller reads: the sidecar's (docs/protocol.md §6) with
our additions (`reason_code` of our own card, `untrusted_source`, `grant_id`), or a refusal
decided before the sidecar (`decision: "refused"`: nothing is sent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.agent.gate.tool_runtime import INVALID_ARGUMENTS
from agentchat.agent.gate.upstream_pins import CHANGED_TEXT, DEFINITION_CHANGED, UpstreamPins
from agentchat.catalog import Catalog, Tool
from agentchat.digest import object_key
from agentchat.tool_request import InvalidArguments, validate_arguments

REFUSED = "refused"  # a decision taken before the sidecar: nothing is sent
UNTRUSTED_CARD = "confirmation_required_untrusted"
# A write in a forked turn whose abandoned branch ran (or may have run) a write
# (docs/protocol.md §4, "Branches"): the requester's card, whatever the policy says.
FORKED_CARD = "confirmation_required_forked"
# Why a context is untrusted (`untrusted_source`): tool_output, file, uicontext
# (agent/graph/taint.py), and a call from an MCP client, whose model's context we cannot see.
MCP_CLIENT = "mcp_client"
# The requester answers the card (the sidecar's `approval` for mode `self`, docs/protocol.md
# §11): what a grant leaves of a card an untrusted context still needs.
SELF_ANSWER: dict[str, Any] = {"mode": "self", "approvers": [], "quorum": 0,
                               "expires_after_s": None, "escalate_after_s": None,
                               "grant_max_minutes": 0, "rule": None}

# The live grant covering a call of the requester: (tool, environment, object key) -> its id.
GrantLookup = Callable[[str, str | None, str], Awaitable[str | None]]


def refused_call(detail: str, reason: str = INVALID_ARGUMENTS) -> dict[str, Any]:
    return {"decision": REFUSED, "reason_code": reason, "detail": detail}


def own_card(tool: Tool, taint: str | None, forked_write: bool) -> str | None:
    """Why a write needs the requester's own card whatever the policy says (a card's
    `reason_code`): an untrusted context, or a forked turn (edit, regenerate) whose
    abandoned branch ran or may have run a write (docs/protocol.md §4, "Branches")."""
    if tool.risk == "read":
        return None
    if taint is not None:
        return UNTRUSTED_CARD
    return FORKED_CARD if forked_write else None


class Gate:
    """The checks, over the sidecar's client (the execution is agent/gate/execution.py)."""

    def __init__(self, policy: PolicyClient, pins: UpstreamPins | None = None) -> None:
        self.policy = policy
        self.pins = pins

    def offered(self, tool: Tool) -> bool:
        """May the tool be offered at all: an upstream tool in quarantine is not."""
        return self.pins is None or self.pins.offered(tool)

    async def check(self, name: str, arguments: Any, *, offered: Collection[str],
                    user_jwt: str, taint: str | None, catalog: Catalog,
                    forked_write: bool = False,
                    grants: GrantLookup | None = None) -> dict[str, Any]:
        """Our own checks, then the sidecar's, on exactly the arguments that would be sent;
        in an untrusted context (`taint`: why) a write the sidecar lets run without a card
        gets one. `offered`: the tools this caller was offered (any other is refused)."""
        return (await self.judge(name, arguments, offered=offered, user_jwt=user_jwt,
                                 taint=taint, catalog=catalog, forked_write=forked_write,
                                 grants=grants))[0]

    async def judge(self, name: str, arguments: Any, *, offered: Collection[str],
                    user_jwt: str, taint: str | None, catalog: Catalog,
                    forked_write: bool = False, grants: GrantLookup | None = None
                    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """`check`, and the validated arguments it judged (None when refused before)."""
        tool = catalog.get(name)
        if tool is not None and self.pins is not None and not await self.pins.allows(tool):
            # Before "not offered": the turn that chose its tools may predate the quarantine.
            return refused_call(CHANGED_TEXT.removeprefix("not run: "), DEFINITION_CHANGED), None
        if tool is None or name not in offered:
            return refused_call(f"the tool {name!r} was not offered in this turn"), None
        try:
            args = validate_arguments(tool, arguments)
        except InvalidArguments as e:
            return refused_call(f"invalid arguments: {e}"), None
        d = await self.policy.check_call(user_jwt=user_jwt, tool=tool, arguments=args,
                                         untrusted=taint is not None,
                                         catalog_revision=catalog.revision)
        if d.get("decision") == "deny" and d.get("reason_code") == INVALID_ARGUMENTS:
            return refused_call(
                f"invalid arguments: {d.get('detail') or 'refused by the policy'}"), None
        own = own_card(tool, taint, forked_write)
        if own is not None and d.get("decision") == "allow":
            # The agent's own rule, whatever the policy's lines say: text from outside the
            # user's words may have asked for this call (README.md, "Safety properties"), or the
            # turn is a fork after a write.
            d = {**d, "decision": "allow_with_confirmation", "confirmation_required": True,
                 "reason_code": own}
        if UNTRUSTED_CARD in (own, d.get("reason_code")):
            d = {**d, "untrusted_source": taint}
        return await granted(d, tool, args, own, grants), args


async def granted(d: dict[str, Any], tool: Tool, args: dict[str, Any], own: str | None,
                  grants: GrantLookup | None) -> dict[str, Any]:
    """A call the sidecar sends to someone else's approval, covered by a live time-boxed
    grant of an earlier approval (docs/protocol.md §11): the grant stands for that
    approval and nothing else. Otherwise the call runs without a card; a write that needs
    the requester's own card (`own`: an untrusted context, a fork after a write) still
    shows it (its `reason` says why), its decision carrying both the grant and why."""
    approval = d.get("approval") or {}
    if (grants is None or d.get("decision") != "allow_with_confirmation"
            or approval.get("mode") != "other"):
        return d
    grant_id = await grants(tool.name, d.get("env_context"), object_key(args, tool.free_text))
    if grant_id is None:
        return d
    if own is not None:
        return {**d, "reason_code": own, "grant_id": grant_id, "approval": dict(SELF_ANSWER)}
    return {**d, "decision": "allow", "confirmation_required": False, "grant_id": grant_id}
