"""The model node's own stream (agent/graph/model.py `stream_reply`, issue 21): the message it
returns is the one `ainvoke` makes of the same model and input, for the offline planner and for
ChatOpenAI over HTTP (tests/testkit/openai_stub.py), with text and streamed tool calls; the text
it writes is the message's text, chunk by chunk; and it keeps no chunk list while it streams.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from agentchat.agent.graph.model import stream_reply
from agentchat.agent.graph.offline.planner import OfflinePlanner
from testkit.support import Service, start_openai_stub

TOOLS = [{"type": "function", "function": {
    "name": "search_dashboards", "description": "Search dashboards: find dashboards by words",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "env_id": {"type": "string"}},
        "required": ["query"]}}}]
PLAIN = [HumanMessage("echo 60 words", id="h1")]
CALLS = [HumanMessage("find sales dashboards in ss-dev", id="h2")]


async def answered(model: BaseChatModel) -> list[BaseMessage]:
    """A turn after its tool call: the planner answers from the result."""
    plan = await model.bind_tools(TOOLS).ainvoke(CALLS)
    assert isinstance(plan, AIMessage) and plan.tool_calls
    call = plan.tool_calls[0]
    return [*CALLS, AIMessage(content=plan.content, tool_calls=plan.tool_calls),
            ToolMessage(content='{"items": [{"id": 7, "title": "Sales"}], "count": 1}',
                        tool_call_id=call["id"] or "", name=call["name"])]


def comparable(message: AIMessage) -> dict[str, Any]:
    """Everything but the id (a fresh `lc_run--…` per call when the model sends none)."""
    dumped = message.model_dump()
    if str(dumped.get("id") or "").startswith("lc_run--"):
        dumped.pop("id")
    return dumped


async def both(model: BaseChatModel, messages: list[BaseMessage],
               tools: list[dict[str, Any]]) -> tuple[AIMessage, AIMessage, list[str]]:
    written: list[str] = []

    def write(event: Any) -> None:
        assert event["type"] == "stream_token"
        written.append(event["token"])

    lean = await stream_reply(model, messages, tools, write)
    bound = model.bind_tools(tools) if tools else model
    reference = await bound.ainvoke(messages)
    assert isinstance(reference, AIMessage)
    return lean, reference, written


@pytest.fixture(scope="module")
def openai_stub() -> Iterator[Service]:
    svc = start_openai_stub()
    try:
        yield svc
    finally:
        svc.stop()


def models(stub: Service) -> list[BaseChatModel]:
    """Made inside the event loop that uses them (the OpenAI client binds to its loop)."""
    return [OfflinePlanner(),
            # its own HTTP client: LangChain's shared default belongs to the first loop
            ChatOpenAI(model="stub-model", base_url=stub.url + "/v1",  # type: ignore[call-arg]
                       api_key="k", streaming=True, max_retries=0, timeout=10,
                       http_async_client=httpx.AsyncClient())]


async def check(stub: Service, case: str) -> None:
    for model in models(stub):
        messages = {"plain": PLAIN, "calls": CALLS}.get(case) or await answered(model)
        tools = [] if case == "plain" else TOOLS
        lean, reference, written = await both(model, messages, tools)
        assert comparable(lean) == comparable(reference), type(model).__name__
        assert "".join(written) == lean.text
        assert len(written) > (30 if case == "plain" else 1)
        if case == "calls":
            assert lean.tool_calls and lean.tool_calls == reference.tool_calls


@pytest.mark.parametrize("case", ["plain", "calls", "answer"])
def test_the_streamed_message_is_the_one_ainvoke_makes(openai_stub: Service, case: str) -> None:
    asyncio.run(check(openai_stub, case))


def test_no_chunk_list_is_kept_while_streaming() -> None:
    """What the stream holds at its last token, for a 400-token answer: a few folded chunks,
    not ~1.8 KB per token (BaseChatModel's own streaming keeps every chunk until the end)."""
    held: list[int] = []
    model = OfflinePlanner()

    def write(event: Any) -> None:
        held.append(tracemalloc.get_traced_memory()[0])

    asyncio.run(stream_reply(model, [HumanMessage("echo 400 words", id="h3")], [], write))
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        held.clear()
        asyncio.run(stream_reply(model, [HumanMessage("echo 400 words", id="h3")], [], write))
    finally:
        tracemalloc.stop()
    grown_kb = (max(held) - start) / 1024
    # the answer itself is ~2.3 KB of text; the old path held ~740 KB at this point
    assert grown_kb < 120, grown_kb
