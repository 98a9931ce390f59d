"""The Gradio app mounted at /api/agent/gradio: the `/chat` API (docs/protocol.md §1–§2), a built-in
page for people who open it in a browser.

`/chat` is a `gr.api` endpoint, so its seven inputs keep their names and defaults for both
positional and named calls. The page has its own UI functions (ChatInterface's page would
replace the bubble on every event): tool calls become Gradio's collapsible tool messages and a
card shows Confirm and Deny (or Close) with a countdown.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import gradio as gr

from agentchat.agent.chat.stream import run_chat
from agentchat.agent.settings import AgentSettings
from agentchat.agent.wiring import ServiceHolder
from agentchat.identity import DEMO_USERS

EXAMPLES = [
    {"text": "Что ты умеешь?"},
    {"text": "Найди дашборды про энергопотребление"},
    {"text": "Какое состояние у prod?"},
    {"text": "Find sales dashboards in ss-dev"},
    {"text": "Deploy dashboard 42 to ss-stage"},
]


def _fail_fast_matplotlib() -> None:
    """Gradio wraps every event of a stream in MatplotlibBackendMananger, which imports
    matplotlib; when it is not installed, each failed import searches sys.path again (7% of the
    agent's CPU with 200 streams, py-spy). A None entry makes that import fail at once."""
    if "matplotlib" not in sys.modules and importlib.util.find_spec("matplotlib") is None:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]


def build_blocks(holder: ServiceHolder, settings: AgentSettings) -> gr.Blocks:
    _fail_fast_matplotlib()
    with gr.Blocks(title="AgentChat") as blocks:

        async def chat(
            message: dict[str, Any] | str,
            action: str | None = None,
            conversation_id: str | None = None,
            uicontext: str | None = None,
            user_id: str | None = None,
            user_jwt: str | None = None,
            env_id: str | None = None,
            request: gr.Request = None,  # type: ignore[assignment]
        ) -> AsyncIterator[dict[str, Any]]:
            """One submit of the chat: a message, a card's answer, or a retry."""
            async for event in run_chat(
                holder.get().chat, message=message, action=action,
                conversation_id=conversation_id, uicontext=uicontext, user_id=user_id,
                user_jwt=user_jwt, env_id=env_id,
                headers=request.headers if request else None,
                session=(request.session_hash if request else None) or "anonymous",
            ):
                yield event

        chat.__annotations__["return"] = dict[str, Any]  # gr.api types the stream's items
        gr.api(chat, api_name="chat", concurrency_limit=settings.chat_concurrency)
        _build_page(holder, settings)
    return blocks


def _build_page(holder: ServiceHolder, settings: AgentSettings) -> None:
    gr.Markdown("## AgentChat — ss-tools assistant")
    with gr.Row():
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

    def token_for(user_value: str) -> str:
        services = holder.get()
        if services.dev_issuer is not None:
            return services.dev_issuer.mint(user_value)
        return user_value

    async def page_turn(text: str | None, action: str | None, card: dict[str, Any] | None,
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
            holder.get().chat, message=message, action=action,
            conversation_id=conversation or None, uicontext=None, user_id=None,
            user_jwt=token_for(user_value), env_id=None, headers=None,
            session="page-" + (request.session_hash or "anonymous"),
        ):
            view.apply(ev)
            yield _frame(view, gr.update())

    outputs = [chatbot, conv, box, card_box, card_md, countdown, confirm_btn, deny_btn,
               card_state, timer]

    async def on_send(text: str, history: list[dict[str, Any]], conversation: str,
                      user_value: str, request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        if not (text or "").strip():
            return
        async for out in page_turn(text, None, None, history, conversation, user_value,
                                   request):
            yield out

    async def on_confirm(card: dict[str, Any] | None, history: list[dict[str, Any]],
                         conversation: str, user_value: str,
                         request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in page_turn(None, "confirm", card, history, conversation, user_value,
                                   request):
            yield out

    async def on_deny(card: dict[str, Any] | None, history: list[dict[str, Any]],
                      conversation: str, user_value: str,
                      request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in page_turn(None, "deny", card, history, conversation, user_value,
                                   request):
            yield out

    send_ev = send.click(on_send, [box, chatbot, conv, user], outputs,
                         api_visibility="private", concurrency_limit=None)
    submit_ev = box.submit(on_send, [box, chatbot, conv, user], outputs,
                           api_visibility="private", concurrency_limit=None)
    answer_inputs = [card_state, chatbot, conv, user]
    confirm_ev = confirm_btn.click(on_confirm, answer_inputs, outputs,
                                   api_visibility="private", concurrency_limit=None)
    deny_ev = deny_btn.click(on_deny, answer_inputs, outputs, api_visibility="private",
                             concurrency_limit=None)
    # Stop cancels whatever runs, also the run a confirmed card resumed.
    stop.click(None, None, None, cancels=[send_ev, submit_ev, confirm_ev, deny_ev],
               api_visibility="private")
    chatbot.example_select(_example_text, None, box, api_visibility="private")
    # A trivial tick per open card: no queue slot, and no loading overlay flashing every second.
    timer.tick(_tick, card_state, [countdown, timer], api_visibility="private",
               concurrency_limit=None, show_progress="hidden")
    user.change(lambda _: _frame(_Transcript([], ""), ""), user, outputs,
                api_visibility="private")


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
