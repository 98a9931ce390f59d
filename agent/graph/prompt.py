"""What the agent tells the model: the system prompt in the turn's language, and the turn's
context (environment, UIContext, what was prefetched) as one system message.

Any model gets these words (an OpenAI-compatible endpoint, or the offline planner, which reads
the context back with `read_context` as a real model reads its prompt). Nothing here is
stored: the context is rebuilt for every model call from the turn's runtime.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from agentchat.words import Lang, as_lang

CONTEXT_MARKER = "Turn context (JSON):"


@dataclass(frozen=True)
class TurnContext:
    """What the agent tells the model about this turn (never stored)."""

    env_id: str | None = None
    uicontext: dict[str, Any] | None = None
    prefetched: dict[str, Any] | None = None
    # An edit's or a regenerate's turn (docs/protocol.md §4, "Branches"): `{message_id, executed}`,
    # the writes the abandoned branch already ran, so the model does not silently repeat them.
    forked_from: dict[str, Any] | None = None


# The system prompt, in the turn's language: what to do, and how to say it (agentchat/words.py).
SYSTEM_PROMPT: dict[Lang, str] = {
    "ru": (
        "Ты — ассистент ss-tools для дашбордов, датасетов, миграций, обслуживания и здоровья "
        "окружений Superset. Пользуйся данными инструментами; окружение вызова — то, что "
        "названо в сообщении, иначе envId из контекста страницы, когда сообщение говорит о её "
        "объекте, иначе env_id.\n"
        "Отвечай только по-русски, как коллега: коротко, с числами, названиями, номерами и "
        "окружениями. Называй действия их названиями из описаний инструментов, а не "
        "внутренними именами; объекты — по названию в кавычках «…» с номером. Никогда не "
        "показывай JSON, внутренние идентификаторы без пояснения и текст ошибок сервера: "
        "объясни, что случилось и что можно сделать. Если пользователь отклонил действие, "
        "прими это как его решение; если прав не хватает, предложи разрешённые альтернативы."),
    "en": (
        "You are the ss-tools assistant for Superset dashboards, datasets, migrations, "
        "maintenance and health. Use the tools given; the environment of a call is the one "
        "named in the message, else the UI context's envId when the message refers to the "
        "context object, else env_id.\n"
        "Answer in English only, like a colleague: briefly, with counts, titles, numbers and "
        "environments. Name actions by the titles in the tool descriptions, never by internal "
        "names; name objects by their title in quotes with their number. Never show JSON, "
        "internal ids without a label, or the server's error text: explain what happened and "
        "what can be done. When the user declined an action, acknowledge it as their choice; "
        "when a permission is missing, offer the permitted alternatives."),
}


# Said with `forked_from`: the conversation went back to an earlier point, and what the
# other branch did in the world stays done.
FORK_NOTE: dict[Lang, str] = {
    "ru": ("Пользователь вернулся к более раннему сообщению. Действия из executed уже "
           "выполнены в другой ветке разговора: не повторяй их молча; если нужно снова, "
           "предложи их явно."),
    "en": ("The user went back to an earlier message. The actions in executed were already "
           "run on another branch of this conversation: do not repeat them silently; if one "
           "is needed again, propose it explicitly."),
}


def context_message(ctx: TurnContext, lang: Lang = "ru") -> SystemMessage:
    """The system prompt, then the turn's context as JSON after CONTEXT_MARKER."""
    payload: dict[str, Any] = {"env_id": ctx.env_id, "uicontext": ctx.uicontext,
                               "prefetched": ctx.prefetched, "lang": lang}
    if ctx.forked_from is not None:
        payload["forked_from"] = {**ctx.forked_from, "note": FORK_NOTE[lang]}
    return SystemMessage(SYSTEM_PROMPT[lang] + "\n" + CONTEXT_MARKER + " "
                         + json.dumps(payload, ensure_ascii=False))


def read_context(messages: Sequence[BaseMessage]) -> tuple[TurnContext, Lang | None]:
    """The turn's context and language from the context message, if the thread has one."""
    for m in messages:
        if isinstance(m, SystemMessage) and CONTEXT_MARKER in str(m.content):
            raw = json.loads(str(m.content).split(CONTEXT_MARKER, 1)[1])
            lang = as_lang(raw["lang"]) if raw.get("lang") else None
            return TurnContext(env_id=raw.get("env_id"), uicontext=raw.get("uicontext"),
                               prefetched=raw.get("prefetched"),
                               forked_from=raw.get("forked_from")), lang
    return TurnContext(), None
