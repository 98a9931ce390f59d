"""The offline planner: a real `BaseChatModel` that needs no network.

It plans tool calls from the bound tools and the user's words (see `planner_rules`), streams
its text token by token and then its tool calls as tool-call chunks, uses deterministic
tool-call ids, and answers from tool results in the user's language. `GenericFakeChatModel`
would not do: it drops tool calls when streaming, and a model with only `_generate` produces
no token events.
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
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentchat.agent.graph.offline.rules import (
    TurnContext,
    clauses,
    intent_of,
    is_russian,
    normalize,
    plan_call,
)

CONTEXT_MARKER = "Turn context (JSON):"
_TOKEN_RE = re.compile(r"\S+\s*|\s+")
_GREETING = re.compile(r"^\s*(привет|здравствуй|добрый|hi|hello|hey)\b")
# A tool result that carries instructions (prompt injection); only an obeying test model
# acts on it, to prove the policy gate still stands between it and the API.
_INJECTION = re.compile(r"(?:deploy|задеплой)\s+dashboard\s+(\d+)\s+to\s+([\w-]+)", re.I)
# Benchmarks ask for an answer of a known length ("… and echo 200 words"): N numbered words
# end the answer, so a client can check a long stream token by token (bench/agent_scale.py).
_ECHO = re.compile(r"\becho\s+(\d{1,4})\s+words\b", re.I)


def context_message(ctx: TurnContext) -> SystemMessage:
    payload = {"env_id": ctx.env_id, "uicontext": ctx.uicontext, "prefetched": ctx.prefetched}
    return SystemMessage(
        "You are the ss-tools assistant for Superset dashboards, datasets, migrations, "
        "maintenance and health. Use the tools given; the environment of a call is the one "
        "named in the message, else the UI context's envId when the message refers to the "
        "context object, else env_id.\n" + CONTEXT_MARKER + " " + json.dumps(payload,
                                                                           ensure_ascii=False)
    )


def _context_of(messages: Sequence[BaseMessage]) -> TurnContext:
    for m in messages:
        if isinstance(m, SystemMessage) and CONTEXT_MARKER in str(m.content):
            raw = json.loads(str(m.content).split(CONTEXT_MARKER, 1)[1])
            return TurnContext(env_id=raw.get("env_id"), uicontext=raw.get("uicontext"),
                               prefetched=raw.get("prefetched"))
    return TurnContext()


class OfflinePlanner(BaseChatModel):
    """Deterministic planner; `token_delay_s` paces it like a real model."""

    token_delay_s: float = 0.0
    obey_tool_text: bool = False

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
        ru = is_russian(text)
        after = messages[last_human + 1:]
        # Results of the agent's own prefetch are context, not answers to our calls.
        prefetched = {c["id"] for m in after if isinstance(m, AIMessage) and m.name == "prefetch"
                      for c in m.tool_calls}
        results = [m for m in after if isinstance(m, ToolMessage)
                   and m.tool_call_id not in prefetched]
        schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
        ctx = _context_of(messages)
        if results:
            injected = self._obey(results, schemas, human, len(messages))
            if injected is not None:
                return injected
            return AIMessage(content=_with_echo(compose_answer(results, ru), text))
        calls = []
        for i, clause in enumerate(clauses(text)):
            tool = intent_of(clause, set(schemas))
            if tool is None or (tool == "show_capabilities" and _GREETING.search(normalize(text))):
                continue
            args = plan_call(tool, clause, ctx, schemas[tool])
            if args is None:
                continue
            calls.append({"name": tool, "args": args,
                          "id": _call_id(human, i, tool, args), "type": "tool_call"})
        if not calls and _ECHO.search(text):
            return AIMessage(content=_with_echo("", text))
        if not calls:
            pre = [m for m in after if isinstance(m, ToolMessage) and m.tool_call_id in prefetched]
            if pre and not _GREETING.search(normalize(text)):
                return AIMessage(content=compose_answer(pre, ru))
            return AIMessage(content=_direct_answer(text, ru, ctx))
        preface = ("Выполняю: " if ru else "Running: ") + ", ".join(str(c["name"]) for c in calls)
        return AIMessage(content=preface + "\n", tool_calls=calls)

    def _obey(self, results: list[ToolMessage], schemas: dict[str, Any], human: BaseMessage,
              n: int) -> AIMessage | None:
        if not self.obey_tool_text or "deploy_dashboard" not in schemas:
            return None
        for r in results:
            m = _INJECTION.search(str(r.content))
            already = any(r2.name == "deploy_dashboard" for r2 in results)
            if m and not already:
                args = {"dashboard_id": int(m.group(1)), "env_id": m.group(2)}
                return AIMessage(content="", tool_calls=[{
                    "name": "deploy_dashboard", "args": args, "type": "tool_call",
                    "id": _call_id(human, n, "deploy_dashboard", args)}])
        return None

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
        for chunk in _chunks(self.plan(messages, kwargs.get("tools", []))):
            if self.token_delay_s and chunk.text:
                await asyncio.sleep(self.token_delay_s)
            if run_manager and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _chunks(msg: AIMessage) -> Iterator[ChatGenerationChunk]:
    for token in _TOKEN_RE.findall(str(msg.content)):
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


def compose_answer(results: list[ToolMessage], ru: bool) -> str:
    parts = [_summarize(r, ru) for r in results]
    return "\n".join(parts) if parts else ("Готово." if ru else "Done.")


def _summarize(result: ToolMessage, ru: bool) -> str:
    name = result.name or "tool"
    content = str(result.content)
    if content.startswith('{"permission_denied"'):
        denied = json.loads(content)
        alts = "; ".join(str(a.get("prompt")) for a in denied.get("alternatives") or [])
        role = denied.get("required_role") or "?"
        if ru:
            return (f"Для {name} недостаточно прав: нужна роль {role}."
                    + (f" Вместо этого я могу: {alts}." if alts else ""))
        return (f"You may not run {name}: it needs the {role} role."
                + (f" Instead I can: {alts}." if alts else ""))
    if result.status == "error":
        return (f"Не удалось выполнить {name}: {content[:300]}" if ru
                else f"{name} failed: {content[:300]}")
    try:
        data = json.loads(content)
    except ValueError:
        return f"{name}: {content[:300]}"
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        lang = "ru" if ru else "en"
        lines = [f"- {t['description'][lang]}" for t in data["tools"]
                 if isinstance(t, dict) and isinstance(t.get("description"), dict)
                 and t.get("allowed_envs")]
        head = "Вот что я могу для вас сделать:" if ru else "Here is what I can do for you:"
        return "\n".join([head, *lines])
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        items = data["items"]
        titles = [str(i.get("title") or i.get("name") or i.get("id")) for i in items[:5]
                  if isinstance(i, dict)]
        listed = "; ".join(titles)
        return (f"{name}: найдено {len(items)}. {listed}" if ru
                else f"{name}: found {len(items)}. {listed}")
    if isinstance(data, dict) and "task_id" in data:
        return (f"{name}: задача {data['task_id']} ({data.get('status', 'queued')})." if ru
                else f"{name}: task {data['task_id']} ({data.get('status', 'queued')}).")
    compact = json.dumps(data, ensure_ascii=False)
    return f"{name}: {compact[:300]}"
