"""Untrusted is a property of what the model sees, not of one turn (README.md, "Safety properties").

A turn is untrusted when anything in the model's context came from outside the user's own
words, wherever in the thread it is (until compaction drops it):

    a tool result (ss-tools output, this turn's or an earlier one's)  -> "tool_output"
    file text attached to a user message                               -> "file"
    a UIContext field other than an id (objectName, route)             -> "uicontext"

In an untrusted turn every write needs a card, whatever the policy's no-card rules say (the
policy node, agent/graph/builder.py); reads stay as they are. The agent's own tool results
(a refusal, "the user denied it", a repair of a dangling call) are ours, marked with
`own_result`, and do not count; a ToolMessage without the mark counts, so a result stored by
an older version fails closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from agentchat.words import Lang, pick

Source = Literal["tool_output", "file", "uicontext"]
# Kept in a message's additional_kwargs, which the OpenAI adapter never sends for user and
# tool messages (only `name`), so the model never sees the mark.
MARK = "agentchat_source"
AGENT = "agent"   # a ToolMessage the agent wrote itself
FILES = "files"   # a user message that carries uploaded file text
# UIContext fields that are ids or drawn from a closed set: everything else is free text
# someone other than the user may have written (a dashboard's title).
UICONTEXT_IDS = frozenset({"objectType", "objectId", "envId", "contextVersion"})


def own_result(content: str, *, tool_call_id: str, name: str) -> ToolMessage:
    """A tool result the agent wrote (never ss-tools text): it does not taint the context."""
    return ToolMessage(content=content, tool_call_id=tool_call_id, name=name, status="error",
                       additional_kwargs={MARK: AGENT})


def user_message(content: str, *, message_id: str, with_files: bool) -> HumanMessage:
    """The user's message as the graph gets it; one that carries file text says so."""
    return HumanMessage(content=content, id=message_id,
                        additional_kwargs={MARK: FILES} if with_files else {})


def context_taint(messages: Iterable[BaseMessage],
                  uicontext: Mapping[str, Any] | None) -> Source | None:
    """Why the model's context is untrusted, or None when it holds only the user's words
    and the agent's own."""
    for m in messages:
        kwargs = getattr(m, "additional_kwargs", None) or {}
        if isinstance(m, ToolMessage) and kwargs.get(MARK) != AGENT:
            return "tool_output"
        if isinstance(m, HumanMessage) and kwargs.get(MARK) == FILES:
            return "file"
    if uicontext and any(v not in (None, "") for k, v in uicontext.items()
                         if k not in UICONTEXT_IDS):
        return "uicontext"
    return None


def taint_reason(source: str | None, lang: Lang) -> str | None:
    """What an untrusted card says about why it is asked, in the turn's language."""
    if source == "tool_output":
        return pick(lang, "В разговоре есть данные из ss-tools, которые мог написать кто "
                          "угодно: подтвердите действие сами.",
                    "The conversation holds ss-tools data that anyone may have written: "
                    "confirm this action yourself.")
    if source == "file":
        return pick(lang, "В разговоре есть текст из загруженного файла: подтвердите "
                          "действие сами.",
                    "The conversation holds text from an uploaded file: confirm this action "
                    "yourself.")
    if source == "uicontext":
        return pick(lang, "Контекст страницы содержит название, которое писали не вы: "
                          "подтвердите действие сами.",
                    "The page's context carries a name you did not write: confirm this "
                    "action yourself.")
    return None
