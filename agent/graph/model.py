"""The model behind the agent: the offline planner, or any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import httpx
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, message_chunk_to_message
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.utils.utils import LC_ID_PREFIX
from opentelemetry import trace
from prometheus_client import Gauge

from agentchat.agent.graph.offline.planner import OfflinePlanner
from agentchat.agent.metrics import REGISTRY
from agentchat.agent.settings import AgentSettings
from agentchat.http_clients import no_cookie_client

OFFLINE = "offline"
# init_chat_model providers built on the `openai` SDK (they take our HTTP clients).
OPENAI_PROVIDERS = ("openai", "azure_openai")


def make_llm(settings: AgentSettings) -> BaseChatModel:
    if settings.llm == OFFLINE:
        return OfflinePlanner(token_delay_s=settings.tuning.planner_token_delay_s)
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"timeout": settings.llm_timeout_s, "max_retries": 0,
                              "streaming": True}
    if settings.llm_base_url:
        kwargs["base_url"] = settings.llm_base_url
    if settings.llm_api_key:
        kwargs["api_key"] = settings.llm_api_key
    model = settings.llm if ":" in settings.llm else f"openai:{settings.llm}"
    if model.split(":", 1)[0] in OPENAI_PROVIDERS:
        # langchain-openai's own clients are cached per endpoint and keep cookies: ours
        # keep none (agentchat/http_clients.py), so no user's cookie reaches another's call.
        import openai

        kwargs["http_async_client"] = no_cookie_client(openai.DefaultAsyncHttpxClient)
        kwargs["http_client"] = no_cookie_client(openai.DefaultHttpxClient)
    chat_model: BaseChatModel = init_chat_model(model, **kwargs)
    return chat_model


TRACER = trace.get_tracer("agentchat.agent")
# Chunks merged in one `+`: a merge is one pass over what it joins, so folding every 4 keeps
# a handful of chunk objects alive instead of the whole answer's, for one extra pass each time
# (a 200-token answer: ~8 KB less held than folding every 8 at the same CPU; every 2 saves
# ~3 KB more for +40% of this loop's CPU; bench/HISTORY.md, "The next session").
FOLD_EVERY = 4


def _lean_source(runnable: Runnable[Any, Any]) -> tuple[BaseChatModel, dict[str, Any]] | None:
    """The chat model and its bound call arguments (`bind_tools`' tools) when its streaming
    hook can be read directly; None when something BaseChatModel.astream adds is in use
    here (a cache, a rate limiter, v1 content blocks, streaming switched off)."""
    model, kwargs = ((runnable.bound, dict(runnable.kwargs))
                     if isinstance(runnable, RunnableBinding) else (runnable, {}))
    if not isinstance(model, BaseChatModel) or type(model)._astream is BaseChatModel._astream:
        return None
    cached = model.cache is not False and (model.cache is not None
                                           or get_llm_cache() is not None)
    if (cached or model.rate_limiter is not None or model.output_version == "v1"
            or model.disable_streaming):
        return None
    return model, kwargs


async def _chunks(runnable: Runnable[Any, Any], messages: list[BaseMessage]
                  ) -> AsyncIterator[ChatGenerationChunk | AIMessage]:
    """The model's stream as BaseChatModel.ainvoke's streaming branch sees it (same chunk
    ids and response metadata), without what the turn does not use: the per-token callback
    dispatch and the list of every chunk kept for `on_llm_end` (~1.8 KB a token)."""
    lean = _lean_source(runnable)
    if lean is None:  # the public path, callbacks off; a model that cannot stream gives one
        async for item in runnable.astream(messages, config={"callbacks": []}):
            yield ChatGenerationChunk(message=item) if isinstance(item, AIMessageChunk) else item
        return
    model, kwargs = lean
    run_id = f"{LC_ID_PREFIX}-{uuid.uuid4()}"
    last: ChatGenerationChunk | None = None
    # aclosing: a cancelled turn closes the model's HTTP stream now, not at garbage collection
    source = cast(AsyncGenerator[ChatGenerationChunk, None], model._astream(messages, **kwargs))
    async with contextlib.aclosing(source) as stream:
        async for chunk in stream:
            if chunk.message.id is None:
                chunk.message.id = run_id
            if chunk.generation_info:
                chunk.message.response_metadata = {**chunk.generation_info,
                                                   **chunk.message.response_metadata}
            last = chunk
            yield chunk
    if last is None:
        raise ValueError("No generation chunks were returned")
    if isinstance(last.message, AIMessageChunk) and not last.message.chunk_position:
        empty: Any = "" if isinstance(last.message.content, str) else []
        yield ChatGenerationChunk(message=AIMessageChunk(content=empty, chunk_position="last",
                                                         id=run_id))


async def stream_reply(llm: BaseChatModel, messages: list[BaseMessage],
                       tools: Sequence[dict[str, Any]], write: Callable[[Any], None]
                       ) -> AIMessage:
    """One model call for the graph's `model` node: each text chunk goes to `write` as a
    `stream_token` as it arrives (the turn coalesces them), and the message returned is the
    one `ainvoke` would have made of the same stream (merged by the same `+`, folded every
    FOLD_EVERY chunks: the merge is associative). Its span carries the time to the first
    token and the counts, set once at the end."""
    runnable: Runnable[Any, Any] = llm.bind_tools(list(tools)) if tools else llm
    started = time.monotonic()
    first_s: float | None = None
    text_chunks = 0
    merged: ChatGenerationChunk | None = None
    pending: list[ChatGenerationChunk] = []
    with TRACER.start_as_current_span("agentchat.model") as span:
        async for chunk in _chunks(runnable, messages):
            if not isinstance(chunk, ChatGenerationChunk):  # a model that does not stream
                if chunk.text:
                    write({"type": "stream_token", "token": chunk.text})
                return chunk
            content = chunk.message.content
            text = content if isinstance(content, str) else chunk.message.text
            if text:
                if first_s is None:
                    first_s = time.monotonic() - started
                text_chunks += 1
                write({"type": "stream_token", "token": text})
            pending.append(chunk)
            if len(pending) >= FOLD_EVERY:
                merged = _fold(merged, pending)
                pending = []
        merged = _fold(merged, pending)
        assert merged is not None
        message = message_chunk_to_message(merged.message)
        # As BaseChatModel does after a generation: its info under the message's own metadata.
        message.response_metadata = {**(merged.generation_info or {}),
                                     **message.response_metadata}
        assert isinstance(message, AIMessage)
        usage: dict[str, Any] = dict(message.usage_metadata or {})
        span.set_attributes({
            "agentchat.model.ttft_ms": round((first_s or 0.0) * 1000, 1),
            "agentchat.model.text_chunks": text_chunks,
            "agentchat.model.tool_calls": len(message.tool_calls),
            "gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
            "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0))})
    return message


def _fold(merged: ChatGenerationChunk | None, pending: list[ChatGenerationChunk]
          ) -> ChatGenerationChunk | None:
    if not pending:
        return merged
    if merged is None:
        return pending[0] + pending[1:]
    return merged + pending


async def llm_status(settings: AgentSettings, http: httpx.AsyncClient) -> dict[str, Any]:
    """`GET /api/agent/llm-status`: is the model endpoint answering, and how fast."""
    checked = datetime.now(UTC).isoformat()
    if settings.llm == OFFLINE:
        return {"model": settings.llm, "reachable": True, "latency_ms": 0.0,
                "checked_at": checked}
    base = (settings.llm_base_url or "https://api.openai.com/v1").rstrip("/")
    started = time.monotonic()
    try:
        headers = {"Authorization": f"Bearer {settings.llm_api_key}"} if settings.llm_api_key \
            else {}
        resp = await http.get(base + "/models", headers=headers, timeout=3.0)
        reachable = resp.status_code < 500
    except httpx.HTTPError:
        reachable = False
    return {"model": settings.llm, "reachable": reachable,
            "latency_ms": round((time.monotonic() - started) * 1000, 1), "checked_at": checked}


# At most one probe of the provider a minute per replica, whatever the cache setting says:
# the probe answers `llm-status` only (readiness never waits on it), so fresher is not needed.
LLM_PROBE_MIN_INTERVAL_S = 60.0

LLM_REACHABLE = Gauge("agentchat_llm_reachable",
                      "1 when the last probe of the model endpoint answered, else 0",
                      registry=REGISTRY)
LLM_PROBE_LATENCY = Gauge("agentchat_llm_probe_latency_seconds",
                          "How long the last probe of the model endpoint took",
                          registry=REGISTRY)


class LlmStatusProbe:
    """`llm_status` cached for `ttl_s` (at least LLM_PROBE_MIN_INTERVAL_S); callers that
    arrive while a probe runs await that same probe, so any number of requests make at most
    one outbound call per interval. Each probe also sets the metrics above."""

    def __init__(self, settings: AgentSettings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http
        self.ttl_s = max(settings.tuning.llm_status_cache_s, LLM_PROBE_MIN_INTERVAL_S)
        self._value: dict[str, Any] | None = None
        self._at = 0.0
        self._inflight: asyncio.Future[dict[str, Any]] | None = None

    async def get(self) -> dict[str, Any]:
        if self._value is not None and time.monotonic() - self._at < self.ttl_s:
            return self._value
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._probe())
        # shield: a caller that disconnects must not cancel the probe the others wait for.
        return await asyncio.shield(self._inflight)

    async def _probe(self) -> dict[str, Any]:
        try:
            value = await llm_status(self.settings, self.http)
            self._value, self._at = value, time.monotonic()
            LLM_REACHABLE.set(1 if value["reachable"] else 0)
            LLM_PROBE_LATENCY.set(value["latency_ms"] / 1000)
            return value
        finally:
            self._inflight = None

