"""The Gradio app mounted at /api/agent/gradio: the `/chat` API (PROTOCOL §1–§2) and a built-in
page for people who open it in a browser.

`/chat` is a `gr.api` endpoint, so its seven inputs keep their names and defaults for both
positional and named calls. The page has its own UI functions (ChatInterface's page would
replace the bubble on every event): tool calls become Gradio's collapsible tool messages and a
card shows Confirm and Deny (or Close) with a countdown.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import gradio as gr
from agentchat.agent.chat import run_chat
from agentchat.agent.services import ServiceHolder
from agentchat.agent.settings import AgentSettings

from agentchat.identity import DEMO_USERS

EXAMPLES = [
    {"text": "Что ты умеешь?"},
    {"text": "Найди дашборды про энергопотребление"},
    {"text": "Какое состояние у prod?"},
    {"text": "Find sales dashboards in ss-dev"},
    {"text": "Deploy dashboard 42 to ss-stage"},
]
TOOL_ICONS = {"tool_end": "done", "tool_error": "done", "tool_timeout": "done"}


def build_blocks(holder: ServiceHolder, settings: AgentSettings) -> gr.Blocks:
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
                               scale=1)
        else:
            user = gr.Textbox(label="User token", type="password", scale=2)
        conv = gr.Textbox(label="Conversation", interactive=False, scale=2)
    chatbot = gr.Chatbot(label="Chat", height=480, examples=EXAMPLES,
                         elem_id="agentchat-chatbot")
    with gr.Group(visible=False, elem_id="agentchat-card") as card_box:
        card_md = gr.Markdown()
        with gr.Row():
            confirm_btn = gr.Button("Confirm", variant="primary", elem_id="card-confirm")
            deny_btn = gr.Button("Deny", variant="stop", elem_id="card-deny")
    card_state = gr.State(None)
    timer = gr.Timer(1.0, active=False)
    with gr.Row():
        box = gr.Textbox(placeholder="Сообщение…", show_label=False, scale=6,
                         elem_id="agentchat-input")
        send = gr.Button("Send", variant="primary", scale=1, elem_id="agentchat-send")
        stop = gr.Button("Stop", scale=1)

    def token_for(user_value: str) -> str:
        services = holder.get()
        if services.dev_issuer is not None:
            return services.dev_issuer.mint(user_value)
        return user_value

    async def page_turn(text: str | None, action: str | None, history: list[dict[str, Any]],
                        conversation: str, user_value: str,
                        request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        history = list(history or [])
        if text:
            history.append({"role": "user", "content": text})
        answer_at: int | None = None
        tools_at: dict[str, int] = {}
        card: dict[str, Any] | None = None
        yield history, conversation, gr.update(visible=False), "", None, gr.update(active=False)
        async for ev in run_chat(
            holder.get().chat, message=text or "__resume__", action=action,
            conversation_id=conversation or None, uicontext=None, user_id=None,
            user_jwt=token_for(user_value), env_id=None, headers=None,
            session="page-" + (request.session_hash or "anonymous"),
        ):
            meta = ev["metadata"]
            conversation = meta.get("conversation_id") or conversation
            kind = meta.get("type")
            if kind in ("tool_start", "tool_retry", "tool_end", "tool_error", "tool_timeout"):
                body = meta.get("output") if kind == "tool_end" else meta.get(
                    "error") or meta.get("input")
                msg = {"role": "assistant",
                       "content": "```json\n" + json.dumps(body, ensure_ascii=False,
                                                           indent=1)[:1500] + "\n```",
                       "metadata": {"title": f"🔧 {meta['tool']} ({kind})",
                                    "status": TOOL_ICONS.get(kind, "pending"),
                                    "id": meta["call_id"]}}
                if meta["call_id"] in tools_at:
                    history[tools_at[meta["call_id"]]] = msg
                else:
                    tools_at[meta["call_id"]] = len(history)
                    history.append(msg)
                    answer_at = None
            elif kind == "confirm_required":
                card = meta
            elif kind == "confirm_resolved":
                history.append({"role": "assistant",
                                "content": f"Карточка: {meta['result']}"})
            else:
                content = ev["content"]
                if kind == "error":
                    content = f"⚠️ {meta['code']}: {meta['detail']}"
                if answer_at is None:
                    answer_at = len(history)
                    history.append({"role": "assistant", "content": content})
                else:
                    history[answer_at] = {"role": "assistant", "content": content}
            yield (history, conversation, gr.update(visible=card is not None),
                   _card_text(card), card, gr.update(active=card is not None))

    outputs = [chatbot, conv, card_box, card_md, card_state, timer]

    async def on_send(text: str, history: list[dict[str, Any]], conversation: str,
                      user_value: str, request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in page_turn(text, None, history, conversation, user_value, request):
            yield out

    async def on_confirm(history: list[dict[str, Any]], conversation: str, user_value: str,
                         request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in page_turn(None, "confirm", history, conversation, user_value, request):
            yield out

    async def on_deny(history: list[dict[str, Any]], conversation: str, user_value: str,
                      request: gr.Request) -> AsyncIterator[tuple[Any, ...]]:
        async for out in page_turn(None, "deny", history, conversation, user_value, request):
            yield out

    send_ev = send.click(on_send, [box, chatbot, conv, user], outputs,
                         api_visibility="private", concurrency_limit=None)
    submit_ev = box.submit(on_send, [box, chatbot, conv, user], outputs,
                           api_visibility="private", concurrency_limit=None)
    for ev in (send_ev, submit_ev):
        ev.then(lambda: "", None, box, api_visibility="private")
    stop.click(None, None, None, cancels=[send_ev, submit_ev], api_visibility="private")
    confirm_btn.click(on_confirm, [chatbot, conv, user], outputs, api_visibility="private",
                      concurrency_limit=None)
    deny_btn.click(on_deny, [chatbot, conv, user], outputs, api_visibility="private",
                   concurrency_limit=None)
    chatbot.example_select(_example_text, None, box, api_visibility="private")
    timer.tick(lambda card: _card_text(card), card_state, card_md, api_visibility="private")

    def _switch_user(_: str) -> tuple[list[Any], str]:
        return [], ""

    user.change(_switch_user, user, [chatbot, conv], api_visibility="private")


def _example_text(evt: gr.SelectData) -> str:
    value = evt.value
    return str(value.get("text", "")) if isinstance(value, dict) else str(value)


def _card_text(card: dict[str, Any] | None) -> str:
    if not card:
        return ""
    try:
        left = (datetime.fromisoformat(card["expires_at"]) - datetime.now(UTC)).total_seconds()
    except (KeyError, ValueError):
        left = 0
    left = max(0, int(left))
    args = json.dumps(card.get("tool_args"), ensure_ascii=False)
    if not card.get("permission_granted", True):
        alts = "\n".join(f"- {a['prompt']} (`{a['action']}`)" for a in card.get("alternatives")
                         or [])
        return (f"### ⛔ {card.get('prompt')}\nНужна роль **{card.get('required_role')}**."
                f"\n\nМожно вместо этого:\n{alts}\n\n_Deny закрывает карточку._")
    danger = " ⚠️ **опасно**" if card.get("dangerous") else ""
    return (f"### ⏸️ {card.get('prompt')}{danger}\n`{card.get('tool_name')}` {args} — "
            f"риск **{card.get('risk')}** в **{card.get('env_context')}**\n\n"
            f"Осталось {left // 60}:{left % 60:02d}")
