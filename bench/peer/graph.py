"""The peer's graph: one node calling the same paced model as the agent, as a LangGraph user
would write it (the model's tokens reach the client through LangGraph's `messages` stream).

Loaded by LangGraph Agent Server from bench/peer/server.py (the peer's virtualenv, no agentchat
on its path). Its settings come from the environment the benchmark gives the server:

    PEER_MODEL            inprocess (the default: a paced echo, the offline planner's answer to
                          `echo N words` split as it splits it) | openai (ChatOpenAI against
                          PEER_OPENAI_BASE_URL, the paced stub both sides call)
    PEER_TOKEN_DELAY_S    the in-process model's pause before each token (1/30)
    PEER_PG_URL           the checkpointer's database (only with the postgres checkpointer)
    PEER_PG_POOL_MAX      its pool's size (20: the agent's AGENTCHAT_AGENT_DB_POOL_MAX default)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph

TOKEN_RE = re.compile(r"\S+\s*|\s+")  # the offline planner's tokenizer
ECHO_RE = re.compile(r"echo (\d+) words")


def answer_to(text: str) -> str:
    """What the offline planner answers `echo N words`: N numbered words."""
    m = ECHO_RE.search(text)
    return " ".join(f"w{i}" for i in range(int(m.group(1)))) if m else text


class PacedEcho(BaseChatModel):
    """The in-process model: the answer one token at a time, `token_delay_s` before each."""

    token_delay_s: float = 1 / 30

    @property
    def _llm_type(self) -> str:
        return "paced-echo"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        text = answer_to(str(messages[-1].content))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: Any = None, **kwargs: Any
                       ) -> AsyncIterator[ChatGenerationChunk]:
        for m in TOKEN_RE.finditer(answer_to(str(messages[-1].content))):
            await asyncio.sleep(self.token_delay_s)
            yield ChatGenerationChunk(message=AIMessageChunk(content=m.group()))


def make_model() -> BaseChatModel:
    if os.environ.get("PEER_MODEL", "inprocess") == "openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model="stub-model", base_url=os.environ["PEER_OPENAI_BASE_URL"],
                          api_key="sk-local", streaming=True, timeout=60,
                          max_retries=0)  # type: ignore[call-arg]
    return PacedEcho(token_delay_s=float(os.environ.get("PEER_TOKEN_DELAY_S", 1 / 30)))


MODEL = make_model()


async def respond(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await MODEL.ainvoke(state["messages"])]}


graph = StateGraph(MessagesState).add_node("model", respond) \
    .add_edge(START, "model").add_edge("model", END).compile()


@contextlib.asynccontextmanager
async def checkpointer() -> AsyncIterator[Any]:
    """Checkpoints in PostgreSQL (LangGraph's own saver on a pool), the closest the offline dev
    server comes to the licensed server's Postgres: `checkpointer.path` in its config."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(
            os.environ["PEER_PG_URL"], min_size=2,
            max_size=int(os.environ.get("PEER_PG_POOL_MAX", "20")), open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0,
                    "row_factory": dict_row}) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        yield saver
