"""The built-in page of the Gradio app (blocks.py), for people who open it in a browser.

It has its own UI functions (ChatInterface's page would replace the bubble on every event):
tool calls become Gradio's collapsible tool messages and a card shows Confirm and Deny (or
Close) with a countdown. Its turns run through `run_chat`, as `/chat`'s do.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import gradio as gr
from gradio.components.chatbot import ExampleMessage

from agentchat.agent.chat.stream import run_chat
from agentchat.agent.settings import AgentSettings
from agentchat.agent.wiring import ServiceHolder
from agentchat.identity import DEMO_USERS

EXAMPLES: list[ExampleMessage] = [
    {"text": "Что ты умеешь?"},
    {"text": "Найди дашборды про энергопотребление"},
    {"text": "Какое состояние у prod?"},
    {"text": "Find sales dashboards in ss-dev"},
    {"text": "Deploy dashboard 42 to ss-stage"},
]



@dataclass
class _Page:
    """The page's components; `outputs()` in the order a turn's frames fill them."""

    user: Any
    conv: Any
    chatbot: Any
    card_box: Any
    card_md: Any
    countdown: Any
    confirm_btn: Any
    deny_btn: Any
    card_state: Any
    timer: Any
    box: Any
    send: Any
    stop: Any

    def outputs(self) -> list[Any]:
        return [self.chatbot, self.conv, self.box, self.card_box, self.card_md, self.countdown,
                self.confirm_btn, self.deny_btn, self.card_state, self.timer]


def build_page(holder: ServiceHolder, settings: AgentSettings) -> None:
    """The built-in page, inside the Blocks that serve `/chat`; its events stay private."""
    page = _layout(settings)
    _wire(page, _PageTurns(holder))


def _layout(settings: AgentSettings) -> _Page:
    gr.Markdown("## AgentChat — ss-tools assistant")
    with gr.Row():
        user: gr.Dropdown | gr.Textbox
        if settings.is_dev:
            user = gr.Dropdown(choices=list(DEMO_USERS), value="alice", label="Demo user",
                               scale=1, elem_id="agentchat-user")
        else:
            user = gr.Textbox(label="User token", type="password", scale=2,
                              elem_id="agentchat-user")
        conv = gr.Textbox(label="Conversation", interactive=False, scale=2,
                          elem_id="agentchat-conversation")
    chatbot = gr.Chatbot(label="Chat", height=480, examples=EXAMPLES,
                         elem_id="agentchat-chatbot")
    # A Column, not a Group: Gradio's Group repeats its elem_id on a nested div.
    with gr.Column(visible=False, variant="panel", elem_id="agentchat-card") as card_box:
        card_md = gr.Markdown(elem_id="card-text")
        countdown = gr.Markdown(elem_id="card-countdown")
        with gr.Row():
            confirm_btn = gr.Button("Confirm", variant="primary", elem_id="card-confirm")
            deny_btn = gr.Button("Deny", variant="stop", elem_id="card-deny")
    card_state = gr.State(None)
    timer = gr.Timer(1.0, active=False)
    with gr.Row():
        box = gr.Textbox(placeholder="Сообщение…", show_label=False, scale=6,
                         elem_id="agentchat-input")
        send = gr.Button("Send", variant="primary", scale=1, elem_id="agentchat-send")
        stop = gr.Button("Stop", scale=1, elem_id="agentchat-stop")
    return _Page(user, conv, chatbot, card_box, card_md, countdown, confirm_btn, deny_btn,
                 card_state, timer, box, send, stop)


def _wire(page: _Page, turns: _PageTurns) -> None:
    outputs = page.outputs()
    typed = [page.box, page.chatbot, page.conv, page.user]
    answer = [page.card_state, page.chatbot, page.conv, page.user]
    private: dict[str, Any] = {"api_visibility": "private", "concurrency_limit": None}
    runs = [page.send.click(turns.on_send, typed, outputs, **private),
            page.box.submit(turns.on_send, typed, outputs, **private),
            page.confirm_btn.click(turns.on_confirm, answer, outputs, **private),
            page.deny_btn.click(turns.on_deny, answer, outputs, **private)]
    # Stop cancels whatever runs, also the run a confirmed card resumed.
    page.stop.click(None, None, None, cancels=runs, api_visibility="private")
    page.chatbot.example_select(_example_text, None, page.box, api_visibility="private")
    # A trivial tick per open card: no queue slot, and no loading overlay flashing every second.
    page.timer.tick(_tick, page.card_state, [page.countdown, page.timer], **private,
                    show_progress="hidden")
    page.user.change(lambda _: _frame(_Transcript([], ""), ""), page.user, outputs,
                     api_visibility="private")


class _PageTurns:
    """The page's turns: a typed message, or a card's answer, streamed as frames."""

    def __init__(self, holder: ServiceHolder) -> None:
        self.holder = holder

    def token_for(self, user_value: str) -> str:
        services = self.holder.get()
        if services.dev_issuer is not None:
            return services.dev_issuer.mint(user_value)
        return user_value

    async def on_send(self, text: str, history: list[dict[str, Any]], conversation: str,
                      user_value: str, request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        if not (text or "").strip():
            return
        async for out in self.turn(text, None, None, history, conversation, user_value,
                                   request):
            yield out

    async def on_confirm(self, card: dict[str, Any] | None, history: list[dict[str, Any]],
                         conversation: str, user_value: str,
                         request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in self.turn(None, "confirm", card, history, conversation, user_value,
                                   request):
            yield out

    async def on_deny(self, card: dict[str, Any] | None, history: list[dict[str, Any]],
                      conversation: str, user_value: str,
                      request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in self.turn(None, "deny", card, history, conversation, user_value,
                                   request):
            yield out

    async def turn(self, text: str | None, action: str | None, card: dict[str, Any] | None,
                   history: list[dict[str, Any]], conversation: str, user_value: str,
                   request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        view = _Transcript(list(history or []), conversation)
        if text:
            view.history.append({"role": "user", "content": text})
        yield _frame(view, "" if text else gr.update())
        message: dict[str, Any] = {"text": text or "__resume__"}
        if action and card and card.get("confirm_id"):
            message["confirm_id"] = card["confirm_id"]  # answer exactly the card shown
        async for ev in run_chat(
            self.holder.get().chat, message=message, action=action,
            conversation_id=conversation or None, uicontext=None, user_id=None,
            user_jwt=self.token_for(user_value), env_id=None, headers=None,
            session="page-" + (request.session_hash or "anonymous"),
        ):
            view.apply(ev)
            yield _frame(view, gr.update())


TOOL_KINDS = ("tool_start", "tool_retry", "tool_end", "tool_error", "tool_timeout")
TOOL_LOG = {"tool_end": "done", "tool_error": "error", "tool_timeout": "timeout"}
RESOLVED = {"confirmed": "✅ Подтверждено", "denied": "✖️ Отклонено",
            "expired": "⌛ Карточка истекла: ничего не выполнено"}


@dataclass
class _ToolCall:
    at: int  # index of its message in the history
    started: float
    input: Any


@dataclass
class _Transcript:
    """One submit's events folded into the page's chat history.

    An event's text is the submit's whole answer so far; a tool message splits it, so each text
    bubble shows only what arrived after the last tool message.
    """

    history: list[dict[str, Any]]
    conversation: str
    card: dict[str, Any] | None = None
    text_at: int | None = None
    text_from: int = 0
    tools: dict[str, _ToolCall] = field(default_factory=dict)

    def apply(self, ev: dict[str, Any]) -> None:
        meta = ev["metadata"]
        self.conversation = meta.get("conversation_id") or self.conversation
        kind = meta.get("type")
        if kind in TOOL_KINDS:
            self._tool(kind, meta, ev.get("content") or "")
        elif kind == "confirm_required":
            self.card = meta
        elif kind == "confirm_resolved":
            self._say(RESOLVED.get(meta["result"], str(meta["result"])))
        elif kind == "error":
            self._say(f"⚠️ {meta['code']}: {meta['detail']}")
        else:  # stream_token or the final answer
            content = str(ev.get("content") or "")[self.text_from:]
            if not content.strip():
                return
            msg = {"role": "assistant", "content": content}
            if self.text_at is None:
                self.text_at = len(self.history)
                self.history.append(msg)
            else:
                self.history[self.text_at] = msg

    def _say(self, text: str) -> None:
        self.history.append({"role": "assistant", "content": text})
        self.text_at = None

    def _tool(self, kind: str, meta: dict[str, Any], text_so_far: str) -> None:
        call_id = str(meta["call_id"])
        call = self.tools.get(call_id)
        if call is None:
            call = self.tools[call_id] = _ToolCall(len(self.history), time.monotonic(),
                                                   meta.get("input"))
            self.history.append({})
            # Text after this tool message goes into a new bubble below it.
            self.text_at, self.text_from = None, len(text_so_far)
        self.history[call.at] = _tool_message(kind, meta, call)


def _json_block(value: Any) -> str:
    return "```json\n" + json.dumps(value, ensure_ascii=False, indent=1)[:1500] + "\n```"


def _tool_message(kind: str, meta: dict[str, Any], call: _ToolCall) -> dict[str, Any]:
    """Gradio's collapsible tool message: a spinner while pending, the outcome when done."""
    parts = [f"**Вход**\n{_json_block(call.input)}"]
    info: dict[str, Any] = {"title": f"🔧 {meta['tool']}", "id": meta["call_id"]}
    if kind in TOOL_LOG:
        info.update(status="done", log=TOOL_LOG[kind],
                    duration=round(time.monotonic() - call.started, 2))
    else:
        info["status"] = "pending"
    if kind == "tool_end":
        parts.append(f"**Результат**\n{_json_block(meta.get('output'))}")
    elif kind == "tool_error":
        parts.append(f"**Ошибка** ({meta.get('retry_count')} попыт.): {meta.get('error')}")
    elif kind == "tool_timeout":
        parts.append(f"**Нет ответа за {meta.get('timeout_seconds')} с**")
    elif kind == "tool_retry":
        info["log"] = f"retry {meta.get('attempt')}/{meta.get('max_attempts')}"
        parts.append(f"Попытка {meta.get('attempt')} не удалась, повторяю…")
    return {"role": "assistant", "content": "\n\n".join(parts), "metadata": info}


def _frame(view: _Transcript, box: Any) -> tuple[Any, ...]:
    """Every output of a page event: chat, conversation, input box, and the card's parts."""
    card = view.card
    granted = bool(card and card.get("permission_granted", True))
    return (view.history, view.conversation, box, gr.update(visible=card is not None),
            _card_text(card), _countdown(card),
            gr.update(visible=granted),
            # A permission-denied card cannot be confirmed: its one button closes it (deny).
            gr.update(value="Deny" if granted or not card else "Close"),
            card, gr.update(active=granted))


def _tick(card: dict[str, Any] | None) -> tuple[str, Any]:
    return _countdown(card), gr.update(active=_seconds_left(card) > 0)


def _example_text(evt: gr.SelectData) -> str:
    value = evt.value
    return str(value.get("text", "")) if isinstance(value, dict) else str(value)


def _seconds_left(card: dict[str, Any] | None) -> int:
    if not card:
        return 0
    try:
        left = (datetime.fromisoformat(card["expires_at"]) - datetime.now(UTC)).total_seconds()
    except (KeyError, TypeError, ValueError):
        return 0
    return max(0, int(left))


def _countdown(card: dict[str, Any] | None) -> str:
    if not card or not card.get("permission_granted", True):
        return ""
    left = _seconds_left(card)
    if left == 0:
        return "⌛ Время вышло: ответ уже не будет принят, отправьте запрос снова."
    return f"⏱️ Осталось **{left // 60:02d}:{left % 60:02d}**"


def _card_text(card: dict[str, Any] | None) -> str:
    if not card:
        return ""
    args = json.dumps(card.get("tool_args"), ensure_ascii=False)
    if not card.get("permission_granted", True):
        alts = "\n".join(f"- {a.get('prompt')} (`{a.get('action')}`)"
                         for a in card.get("alternatives") or []) or "- нет"
        return (f"### ⛔ {card.get('prompt')}\nНужна роль **{card.get('required_role')}**."
                f"\n\nМожно вместо этого:\n{alts}")
    danger = " ⚠️ **опасно**" if card.get("dangerous") else ""
    return (f"### ⏸️ {card.get('prompt')}{danger}\n`{card.get('tool_name')}` {args} — "
            f"риск **{card.get('risk')}** в **{card.get('env_context')}**")
