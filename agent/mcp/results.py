"""A gated call's outcome as an MCP result (docs/protocol.md §12, "tools/call"), and the
card asked inline as an `InputRequiredResult` (2026-07-28) with a form of one boolean.

    Done      isError false; structuredContent: ss-tools' JSON answer; the same as text
    Refused   isError true; {code, detail} (+ required_role, alternatives for a denial)
    Failed    isError true; {code: TOOL_FAILURE, detail, call_id}
    Denied    isError true; {status: "denied", call_id, detail}
    Pending   isError false; {status: confirmation_required | approval_required, call_id,
              approve_url, expires_at, prompt, risk, environment, args_digest, approval}
              and a text telling the person where to go
    AskInline InputRequiredResult: inputRequests {confirm: elicitation/create form},
              requestState (sealed by the domain)
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentchat.agent.chat import Answer, AskInline, CallOutcome, CallStatus, Pending
from agentchat.errors import AgentChatError
from agentchat.words import Lang

CONFIRM = "confirm"  # the one input request's key, and the form's one field

_PENDING_TEXT = {
    ("confirmation_required", "en"): "Not run yet: {prompt} Its requester confirms or denies it "
                                     "at {url} (until {expires}); then `agentchat_call_result` "
                                     "with call_id {call_id} tells what became of it.",
    ("confirmation_required", "ru"): "Ещё не выполнено: {prompt} Подтвердить или отклонить "
                                     "может автор вызова: {url} (до {expires}); затем "
                                     "`agentchat_call_result` с call_id {call_id} скажет, что "
                                     "с ним стало.",
    ("approval_required", "en"): "Not run yet: {prompt} Someone else must approve it at {url} "
                                 "(until {expires}); then `agentchat_call_result` with call_id "
                                 "{call_id} tells what became of it.",
    ("approval_required", "ru"): "Ещё не выполнено: {prompt} Нужно одобрение другого человека: "
                                 "{url} (до {expires}); затем `agentchat_call_result` с call_id "
                                 "{call_id} скажет, что с ним стало.",
}
_FORM_WORDS = {
    "en": ("Confirm", "Run it: risk {risk}, environment {env}.", "Risk: {risk}. Environment: "
           "{env}."),
    "ru": ("Подтвердить", "Выполнить: риск {risk}, окружение {env}.", "Риск: {risk}. "
           "Окружение: {env}."),
}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _structured(value: Any, version: str) -> Any:
    """Any JSON value on 2026-07-28; an object on the handshake revisions."""
    if isinstance(value, dict) or version in MODERN_PROTOCOL_VERSIONS:
        return value
    return {"result": value}


def tool_result(body: Any, *, error: bool, version: str, text: str | None = None,
                ) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text",
                                                           text=text or _json(body))],
                                structured_content=_structured(body, version), is_error=error)


def refusal(e: AgentChatError, version: str) -> types.CallToolResult:
    """A protocol error raised on the way (the sidecar down, a storage outage): not run."""
    return tool_result({"code": str(e.code), "detail": e.detail}, error=True, version=version)


def pending_text(p: Pending, lang: Lang) -> str:
    return _PENDING_TEXT[(p.status, lang)].format(prompt=p.prompt, url=p.approve_url,
                                                  expires=p.expires_at, call_id=p.call_id)


def outcome_result(outcome: CallOutcome, *, version: str, lang: Lang,
                   ) -> types.CallToolResult | types.InputRequiredResult:
    if isinstance(outcome, AskInline):
        return ask_inline(outcome, lang)
    if isinstance(outcome, Pending):
        return tool_result(outcome.structured(), error=False, version=version,
                           text=pending_text(outcome, lang))
    return tool_result(outcome.structured(), error=outcome.kind != "done", version=version)


def ask_inline(ask: AskInline, lang: Lang) -> types.InputRequiredResult:
    """The card as the client's own question to its person: its prompt, why, the risk and
    environment, and one boolean. The retry carries the answer and `requestState`."""
    label, description, facts = _FORM_WORDS[lang]
    env = ask.environment or "—"
    message = "\n".join([ask.prompt, ask.reason, facts.format(risk=ask.risk, env=env)])
    form = types.ElicitRequestFormParams(message=message, requested_schema={
        "type": "object", "required": [CONFIRM],
        "properties": {CONFIRM: {"type": "boolean", "title": label,
                                 "description": description.format(risk=ask.risk, env=env),
                                 "default": False}}})
    return types.InputRequiredResult(input_requests={CONFIRM: types.ElicitRequest(params=form)},
                                     request_state=ask.request_state)


def answer_of(responses: dict[str, Any] | None) -> Answer | None:
    """The person's answer to the form: accept only with `confirm: true`; a form sent back
    unticked is a decline; nothing, or anything else, a cancel."""
    got = (responses or {}).get(CONFIRM)
    if not isinstance(got, types.ElicitResult):
        return None if got is None else "cancel"
    if got.action != "accept":
        return got.action
    return "accept" if (got.content or {}).get(CONFIRM) is True else "decline"


def status_result(status: CallStatus, version: str) -> types.CallToolResult:
    return tool_result(status.structured(), error=False, version=version)
