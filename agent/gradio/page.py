"""The built-in page of the Gradio app (blocks.py), for people who open it in a browser.

Its own UI functions (ChatInterface's page would replace the bubble on every event): tool
calls are collapsible tool messages titled with the tool's title, a card shows the server's
prompt with Confirm and Deny (or Close) and a countdown; turns run through `run_chat`. Text
others wrote is plain text (page_text.py) under a strict CSP (agent/csp.py, page_headers.py).

Words (agentchat/words.py): the page's own words (labels, buttons, banners, the card's frame) follow
the browser's language: the static ones through Gradio's i18n (the browser's locale), the ones the
page's functions write from the request's Accept-Language (`page_language`). Everything the server
says (answers, titles, prompts, alternatives) follows the turn's language.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import gradio as gr
from gradio.components.chatbot import ExampleMessage

from agentchat.agent.gradio.chat_api import run_chat
from agentchat.agent.gradio.page_text import json_block, plain
from agentchat.agent.settings import AgentSettings
from agentchat.agent.wiring import ServiceHolder
from agentchat.identity import DEMO_USERS
from agentchat.words import Lang

EXAMPLES: list[ExampleMessage] = [
    {"text": "Что ты умеешь?"},
    {"text": "Найди дашборды про энергопотребление"},
    {"text": "Какое состояние у prod?"},
    {"text": "Find sales dashboards in ss-dev"},
    {"text": "Deploy dashboard 42 to ss-stage"},
]

# The page's own words, per browser language: static labels through gr.I18n (the frontend
# picks by the browser's locale), the rest through `words(lang)`.
PAGE_WORDS: dict[Lang, dict[str, str]] = {
    "ru": {
        "heading": "## AgentChat — ассистент ss-tools", "demo_user": "Демо-пользователь",
        "user_token": "Токен пользователя", "conversation": "Диалог", "chat": "Чат",
        "confirm": "Подтвердить", "deny": "Отклонить", "close": "Закрыть",
        "placeholder": "Сообщение…", "send": "Отправить", "stop": "Стоп",
        "input": "Вход", "result": "Результат", "error": "Ошибка", "attempts": "попыт.",
        "no_answer": "Нет ответа за {s} с", "retry": "Попытка {n} не удалась, повторяю…",
        "log_done": "готово", "log_error": "ошибка", "log_timeout": "нет ответа",
        "log_retry": "повтор {n}/{m}",
        "confirmed": "✅ Подтверждено", "denied": "✖️ Отклонено",
        "expired": "⌛ Карточка истекла: ничего не выполнено",
        "time_up": "⌛ Время вышло: ответ уже не будет принят, отправьте запрос снова.",
        "left": "⏱️ Осталось **{t}**", "dangerous": "⚠️ **опасно**",
        "role": "Нужна роль **{role}**.", "instead": "Можно вместо этого:", "none": "нет",
        "risk": "риск **{risk}** в **{env}**",
        "risk_read": "чтение", "risk_write": "запись", "risk_destructive": "необратимо",
    },
    "en": {
        "heading": "## AgentChat — the ss-tools assistant", "demo_user": "Demo user",
        "user_token": "User token", "conversation": "Conversation", "chat": "Chat",
        "confirm": "Confirm", "deny": "Deny", "close": "Close",
        "placeholder": "Message…", "send": "Send", "stop": "Stop",
        "input": "Input", "result": "Result", "error": "Error", "attempts": "attempts",
        "no_answer": "No answer within {s} s", "retry": "Attempt {n} failed, retrying…",
        "log_done": "done", "log_error": "error", "log_timeout": "timeout",
        "log_retry": "retry {n}/{m}",
        "confirmed": "✅ Confirmed", "denied": "✖️ Denied",
        "expired": "⌛ The card expired: nothing ran",
        "time_up": "⌛ Time is up: the answer will not be accepted, send the request again.",
        "left": "⏱️ **{t}** left", "dangerous": "⚠️ **dangerous**",
        "role": "Needs the **{role}** role.", "instead": "Instead I can:", "none": "none",
        "risk": "risk **{risk}** in **{env}**",
        "risk_read": "read", "risk_write": "write", "risk_destructive": "irreversible",
    },
}
STATIC = ("heading", "demo_user", "user_token", "conversation", "chat", "confirm", "deny",
          "placeholder", "send", "stop")
I18N = gr.I18n(**{lang: {k: PAGE_WORDS[lang][k] for k in STATIC} for lang in PAGE_WORDS})


def page_language(accept_language: str | None) -> Lang:
    """The browser's language from Accept-Language: the most preferred of ru and en (other
    languages are skipped; none of the two, English, as Gradio's own fallback)."""
    tags = []
    for n, part in enumerate((accept_language or "").split(",")):
        tag, _, q = part.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0
        except ValueError:
            weight = 0.0
        tags.append((-weight, n, tag.strip().lower()))
    for _, _, tag in sorted(tags):
        if tag.startswith("ru"):
            return "ru"
        if tag.startswith("en"):
            return "en"
    return "en"


def _lang_of(request: gr.Request | None) -> Lang:
    headers = getattr(request, "headers", None)
    return page_language(headers.get("accept-language") if headers is not None else None)


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
    """The built-in page, in its own Blocks (blocks.build_page_blocks); its events stay
    private."""
    root = gr.context.Context.root_block
    if root is not None:  # the static labels' translations, sent with the Gradio config
        root.i18n_instance = I18N
    page = _layout(settings)
    _wire(page, _PageTurns(holder))


def _layout(settings: AgentSettings) -> _Page:
    gr.Markdown(I18N("heading"))
    with gr.Row():
        user: gr.Dropdown | gr.Textbox
        if settings.is_dev:
            user = gr.Dropdown(choices=list(DEMO_USERS), value="alice",
                               label=I18N("demo_user"), scale=1, elem_id="agentchat-user")
        else:
            user = gr.Textbox(label=I18N("user_token"), type="password", scale=2,
                              elem_id="agentchat-user")
        conv = gr.Textbox(label=I18N("conversation"), interactive=False, scale=2,
                          elem_id="agentchat-conversation")
    chatbot = gr.Chatbot(label=I18N("chat"), height=480, examples=EXAMPLES,
                         elem_id="agentchat-chatbot")
    # A Column, not a Group: Gradio's Group repeats its elem_id on a nested div.
    with gr.Column(visible=False, variant="panel", elem_id="agentchat-card") as card_box:
        card_md = gr.Markdown(elem_id="card-text")
        countdown = gr.Markdown(elem_id="card-countdown")
        with gr.Row():
            confirm_btn = gr.Button(I18N("confirm"), variant="primary", elem_id="card-confirm")
            deny_btn = gr.Button(I18N("deny"), variant="stop", elem_id="card-deny")
    card_state = gr.State(None)
    timer = gr.Timer(1.0, active=False)
    with gr.Row():
        box = gr.Textbox(placeholder=I18N("placeholder"), show_label=False, scale=6,
                         elem_id="agentchat-input")
        send = gr.Button(I18N("send"), variant="primary", scale=1, elem_id="agentchat-send")
        stop = gr.Button(I18N("stop"), scale=1, elem_id="agentchat-stop")
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
    page.user.change(_cleared, page.user, outputs, api_visibility="private")


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
        view = _Transcript(list(history or []), conversation, _lang_of(request))
        if text:
            view.history.append({"role": "user", "content": text})
        yield _frame(view, "" if text else gr.update())
        message: dict[str, Any] = {"text": text or "__resume__"}
        if action and card and card.get("confirm_id"):
            message["confirm_id"] = card["confirm_id"]  # answer exactly the card shown
        async for ev in run_chat(
            self.holder.get(), message=message, action=action,
            conversation_id=conversation or None, uicontext=None, user_id=None,
            user_jwt=self.token_for(user_value), env_id=None, headers=None,
            session="page-" + (request.session_hash or "anonymous"),
        ):
            view.apply(ev)
            yield _frame(view, gr.update())


TOOL_KINDS = ("tool_start", "tool_retry", "tool_end", "tool_error", "tool_timeout")
TOOL_LOG = {"tool_end": "log_done", "tool_error": "log_error", "tool_timeout": "log_timeout"}
RESOLVED = ("confirmed", "denied", "expired")


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
    lang: Lang = "ru"  # the page's (browser's) language, for the page's own words
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
            result = str(meta["result"])
            self._say(PAGE_WORDS[self.lang][result] if result in RESOLVED else result)
        elif kind == "error":
            # The event's content is the server's words, in the turn's language.
            self._say(f"⚠️ {plain(ev.get('content') or meta.get('detail'))}")
        else:  # stream_token or the final answer
            content = str(ev.get("content") or "")[self.text_from:]
            if not content.strip():
                return
            msg = {"role": "assistant", "content": plain(content)}
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
        self.history[call.at] = _tool_message(kind, meta, call, self.lang)


def _tool_message(kind: str, meta: dict[str, Any], call: _ToolCall,
                  lang: Lang = "ru") -> dict[str, Any]:
    """Gradio's collapsible tool message, titled with the tool's title (the server's words):
    a spinner while pending, the outcome when done."""
    w = PAGE_WORDS[lang]
    parts = [f"**{w['input']}**\n{json_block(call.input)}"]
    info: dict[str, Any] = {"title": f"🔧 {plain(meta.get('title') or meta['tool'])}",
                            "id": meta["call_id"]}
    if kind in TOOL_LOG:
        info.update(status="done", log=w[TOOL_LOG[kind]],
                    duration=round(time.monotonic() - call.started, 2))
    else:
        info["status"] = "pending"
    if kind == "tool_end":
        parts.append(f"**{w['result']}**\n{json_block(meta.get('output'))}")
    elif kind == "tool_error":
        parts.append(f"**{w['error']}** ({meta.get('retry_count')} {w['attempts']}): "
                     f"{plain(meta.get('error'))}")
    elif kind == "tool_timeout":
        parts.append(f"**{w['no_answer'].format(s=meta.get('timeout_seconds'))}**")
    elif kind == "tool_retry":
        info["log"] = w["log_retry"].format(n=meta.get("attempt"), m=meta.get("max_attempts"))
        parts.append(w["retry"].format(n=meta.get("attempt")))
    return {"role": "assistant", "content": "\n\n".join(parts), "metadata": info}


def _frame(view: _Transcript, box: Any) -> tuple[Any, ...]:
    """Every output of a page event: chat, conversation, input box, and the card's parts."""
    card, w = view.card, PAGE_WORDS[view.lang]
    granted = bool(card and card.get("permission_granted", True))
    return (view.history, view.conversation, box, gr.update(visible=card is not None),
            _card_text(card, view.lang), _countdown(card, view.lang),
            gr.update(visible=granted, value=w["confirm"]),
            # A permission-denied card cannot be confirmed: its one button closes it (deny).
            gr.update(value=w["deny"] if granted or not card else w["close"]),
            card, gr.update(active=granted))


async def _cleared(_: Any, request: gr.Request) -> tuple[Any, ...]:
    """Another user: an empty page; a coroutine, so it runs in order, not in a pool thread."""
    return _frame(_Transcript([], "", _lang_of(request)), "")


def _tick(card: dict[str, Any] | None, request: gr.Request) -> tuple[str, Any]:
    return _countdown(card, _lang_of(request)), gr.update(active=_seconds_left(card) > 0)


def _example_text(evt: gr.SelectData) -> str:
    return str(evt.value.get("text", "")) if isinstance(evt.value, dict) else str(evt.value)


def _seconds_left(card: dict[str, Any] | None) -> int:
    if not card:
        return 0
    try:
        left = (datetime.fromisoformat(card["expires_at"]) - datetime.now(UTC)).total_seconds()
    except (KeyError, TypeError, ValueError):
        return 0
    return max(0, int(left))


def _countdown(card: dict[str, Any] | None, lang: Lang = "ru") -> str:
    if not card or not card.get("permission_granted", True):
        return ""
    left = _seconds_left(card)
    if left == 0:
        return PAGE_WORDS[lang]["time_up"]
    return PAGE_WORDS[lang]["left"].format(t=f"{left // 60:02d}:{left % 60:02d}")


def _card_text(card: dict[str, Any] | None, lang: Lang = "ru") -> str:
    """The card: the server's prompt (what the owner approves, in the turn's language) in the
    page's frame; risk and environment as words, no machine names or raw arguments."""
    if not card:
        return ""
    w = PAGE_WORDS[lang]
    if not card.get("permission_granted", True):
        alts = "\n".join(f"- {plain(a.get('prompt'))}"
                         for a in card.get("alternatives") or []) or f"- {w['none']}"
        prompt, role = str(card.get("prompt") or ""), card.get("required_role")
        # The server's prompt names the role already (in the turn's language); said once.
        needs = "" if not role or str(role) in prompt else "\n" + w["role"].format(role=plain(role))
        return f"### ⛔ {plain(prompt)}{needs}\n\n{w['instead']}\n{alts}"
    danger = f" {w['dangerous']}" if card.get("dangerous") else ""
    risk = w.get(f"risk_{card.get('risk')}", plain(card.get("risk")))
    why = f"\n\n{plain(card['reason'])}" if card.get("reason") else ""  # an untrusted card's
    return (f"### ⏸️ {plain(card.get('prompt'))}{danger}\n{plain(card.get('title') or '')} — "
            + w["risk"].format(risk=risk, env=plain(card.get("env_context"))) + why)
