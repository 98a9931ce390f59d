"""The offline planner: a real `BaseChatModel` that needs no network.

It plans tool calls from the bound tools and the user's words (see `planner_rules`), streams
its text token by token and then its tool calls as tool-call chunks, uses deterministic
tool-call ids, and answers from tool results in the turn's language (the system prompt's
`lang`) like a colleague would (`answers.py`), naming tools by the titles their descriptions
start with. `GenericFakeChatModel` would not do: it drops tool calls when streaming, and a
model with only `_generate` produces no token events.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentchat.agent.graph.names import known_names, tool_names_by_call
from agentchat.agent.graph.offline.answers import compose
from agentchat.agent.graph.offline.rules import (
    clauses,
    intent_of,
    is_russian,
    normalize,
    plan_call,
)
from agentchat.agent.graph.offline.said import Said
from agentchat.agent.graph.offline.upstream_intents import (
    SEPARATOR,
    upstream_intent,
    without_names,
)
from agentchat.agent.graph.prompt import TurnContext, read_context

_TOKEN_RE = re.compile(r"\S+\s*|\s+")
_GREETING = re.compile(r"^\s*(привет|здравствуй|добрый|hi|hello|hey)\b")
# Benchmarks ask for an answer of a known length ("… and echo 200 words"): N numbered words
# end the answer, so a client can check a long stream token by token (bench/agent_scale.py).
_ECHO = re.compile(r"\becho\s+(\d{1,4})\s+words\b", re.I)


def titles_of(tools: list[dict[str, Any]]) -> dict[str, str]:
    """name -> title: a tool description the agent sends starts with "<title>: "."""
    out = {}
    for t in tools:
        fn = t.get("function", {})
        title, sep, _ = str(fn.get("description") or "").partition(": ")
        if sep and fn.get("name"):
            out[str(fn["name"])] = title
    return out


# The kind of object each tool's results list (agent/graph/names.py; no catalog here).
RESULT_KINDS = {"search_dashboards": "dashboard", "get_dashboard": "dashboard",
                "search_datasets": "dataset", "refresh_dataset": "dataset",
                "list_databases": "database", "superset_explore_database": "database"}


# Threads whose text is at most this long are planned on the event loop (see _astream).
INLINE_PLAN_CHARS = 4000


class OfflinePlanner(BaseChatModel):
    """Deterministic planner; `token_delay_s` paces it like a real model."""

    token_delay_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "agentchat-offline-planner"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None,
                   **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    # -- planning -----------------------------------------------------------------------------

    def plan(self, messages: Sequence[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        last_human = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)),
                         default=-1)
        if last_human < 0:
            return AIMessage(content="…")
        human = messages[last_human]
        text = str(human.content) if isinstance(human.content, str) else human.text
        ctx, lang = read_context(messages)
        lang = lang or ("ru" if is_russian(text) else "en")
        ru = lang == "ru"
        said = Said(lang, titles_of(tools), known_names(messages, None, lang, RESULT_KINDS))
        by_call = tool_names_by_call(messages)
        after = messages[last_human + 1:]
        # Results of the agent's own prefetch are context, not answers to our calls.
        prefetched = {c["id"] for m in after if isinstance(m, AIMessage) and m.name == "prefetch"
                      for c in m.tool_calls}
        results = [m for m in after if isinstance(m, ToolMessage)
                   and m.tool_call_id not in prefetched]
        schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
        if results:
            return AIMessage(content=_with_echo(compose(results, by_call, said), text))
        calls = []
        for i, clause in enumerate(clauses(text)):
            # Another team's tool only when the clause names its server (upstream_intents.py).
            tool = upstream_intent(clause, set(schemas)) or intent_of(clause, set(schemas))
            if tool is None or (tool == "show_capabilities" and _GREETING.search(normalize(text))):
                continue
            words = without_names(clause, tool) if SEPARATOR in tool else clause
            args = plan_call(tool, words, ctx, schemas[tool])
            if args is None:
                continue
            calls.append({"name": tool, "args": args,
                          "id": _call_id(human, i, tool, args), "type": "tool_call"})
        if not calls and _ECHO.search(text):
            return AIMessage(content=_with_echo("", text))
        if not calls:
            pre = [m for m in after if isinstance(m, ToolMessage) and m.tool_call_id in prefetched]
            if pre and not _GREETING.search(normalize(text)):
                return AIMessage(content=compose(pre, by_call, said))
            return AIMessage(content=_direct_answer(text, ru, ctx))
        doing = ", ".join(said.title(str(c["name"])) for c in calls)
        preface = ("Выполняю: " if ru else "Running: ") + doing + "."
        return AIMessage(content=preface + "\n", tool_calls=calls)

    # -- BaseChatModel ------------------------------------------------------------------------

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(
            message=self.plan(messages, kwargs.get("tools", [])))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        yield from _chunks(self.plan(messages, kwargs.get("tools", [])))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        # Planning is CPU work on the thread's text: a long one in a worker thread, like tool
        # selection, so one message never holds the event loop (every stream on the replica,
        # /livez); a short one (tens of µs) here, as a hop to a thread costs more under a burst.
        tools = kwargs.get("tools", [])
        if sum(len(str(m.content)) for m in messages) <= INLINE_PLAN_CHARS:
            plan = self.plan(messages, tools)
        else:
            plan = await asyncio.to_thread(self.plan, messages, tools)
        for chunk in _chunks(plan):
            if self.token_delay_s and chunk.text:
                await asyncio.sleep(self.token_delay_s)
            if run_manager and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _chunks(msg: AIMessage) -> Iterator[ChatGenerationChunk]:
    # finditer: one token at a time, not the answer's every token held for the whole stream
    for token in (m.group() for m in _TOKEN_RE.finditer(str(msg.content))):
        yield ChatGenerationChunk(message=AIMessageChunk(content=token))
    for index, call in enumerate(msg.tool_calls):
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[{
            "name": call["name"], "args": json.dumps(call["args"], ensure_ascii=False),
            "id": call["id"], "index": index, "type": "tool_call_chunk"}]))
    yield ChatGenerationChunk(message=AIMessageChunk(content="", chunk_position="last"))


def _call_id(human: BaseMessage, position: int, tool: str, args: dict[str, Any]) -> str:
    """Stable per user message and position, so a re-run plans the same ids."""
    seed = f"{human.id}|{position}|{tool}|{json.dumps(args, sort_keys=True)}"
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:20]


def _with_echo(answer: str, text: str) -> str:
    m = _ECHO.search(text)
    if m is None:
        return answer
    words = " ".join(f"w{i}" for i in range(int(m.group(1))))
    return f"{answer}\n{words}" if answer else words


def _direct_answer(text: str, ru: bool, ctx: TurnContext) -> str:
    if _GREETING.search(normalize(text)):
        return ("Привет! Я ассистент ss-tools: ищу дашборды и датасеты, показываю здоровье "
                "окружений, деплою и переношу дашборды, управляю окнами обслуживания."
                if ru else
                "Hello! I am the ss-tools assistant: I find dashboards and datasets, report "
                "environment health, deploy and migrate dashboards, and manage maintenance.")
    return ("Я не нашёл подходящего действия. Уточните, что сделать: например, «найди "
            "дашборды по продажам» или «здоровье prod»."
            if ru else
            "I found no matching action. Tell me what to do, for example \"find sales "
            "dashboards\" or \"health of prod\".")
