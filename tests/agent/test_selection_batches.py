"""Selections of turns that start together (agent/selection/turn_tools.py SelectionQueue,
agent/selection/embeddings.py `together`): they go to the worker thread together, their query
embeddings in one backend call, each answered with its own tools or its own error; a lone one
is chosen at once, as before."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from agentchat.agent.selection.embeddings import (
    EmbeddingsUnavailable,
    QueryBatcher,
    ToolIndex,
    UseEmbedder,
    together,
)
from agentchat.agent.selection.turn_tools import SelectionQueue, TurnToolChooser, TurnTools
from agentchat.agent.settings import AgentSettings
from agentchat.catalog import load_catalog
from agentchat.catalog_source import CatalogSource
from agentchat.settings import PACKAGE_DATA


class Slow:
    """A row per text (its length and a hash), each call taking `delay_s`; records batches."""

    name = "slow"
    default_threshold = 0.5

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.delay_s, self.fail = delay_s, fail
        self.batches: list[list[str]] = []

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        time.sleep(self.delay_s)
        if self.fail:
            raise EmbeddingsUnavailable("endpoint down")
        return np.array([[len(t), hash(t) % 1000] for t in texts], dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_queries(texts)


def expected(text: str) -> list[float]:
    return [float(len(text)), float(hash(text) % 1000)]


def test_a_lone_query_is_one_call_at_once() -> None:
    slow = Slow()
    batcher = QueryBatcher(slow)
    for text in ("a", "bb", "ccc"):
        assert batcher.embed(text).tolist() == expected(text)
    assert slow.batches == [["a"], ["bb"], ["ccc"]]


def test_a_group_is_one_call_made_by_its_first_need() -> None:
    slow = Slow()
    batcher = QueryBatcher(slow)
    texts = ["a", "bb", "a", "ccc"]
    with together(texts):
        assert slow.batches == []  # nothing until a selection needs its embedding
        assert [batcher.embed(t).tolist() for t in reversed(texts)] == \
            [expected(t) for t in reversed(texts)]
        assert batcher.embed("not of the group").tolist() == expected("not of the group")
    assert slow.batches == [["a", "bb", "ccc"], ["not of the group"]]  # each text once
    assert batcher.embed("a").tolist() == expected("a")  # after the group: alone again
    assert slow.batches[-1] == ["a"]


def test_a_group_stays_in_its_own_thread() -> None:
    slow = Slow()
    batcher = QueryBatcher(slow)
    with together(["x", "y"]):
        other = threading.Thread(target=batcher.embed, args=("x",))
        other.start()
        other.join()
    assert slow.batches == [["x"]]


def test_each_query_of_a_failed_group_gets_the_error_and_the_next_works() -> None:
    slow = Slow(fail=True)
    batcher = QueryBatcher(slow)
    errors = []
    with together(["1", "2", "3"]):
        for text in ("1", "2", "3"):
            with pytest.raises(EmbeddingsUnavailable) as e:
                batcher.embed(text)
            errors.append(str(e.value))
    assert errors == ["endpoint down"] * 3 and len(slow.batches) == 1
    slow.fail = False
    assert batcher.embed("ok").tolist() == expected("ok")


def test_use_scores_are_the_same_in_a_group() -> None:
    """The real backend: scores of queries embedded together are those of each alone (to the
    4 decimals they are rounded to)."""
    index = ToolIndex(load_catalog(PACKAGE_DATA / "catalog.yaml"), UseEmbedder())
    queries = ["выкатить дашборд на прод", "echo 200 words", "find sales dashboards",
               "какое состояние у prod", "начни техработы на ss-stage", "что ты умеешь"]
    alone = [index.scores(q) for q in queries]
    with together(queries):
        assert [index.scores(q) for q in queries] == alone


class Counting:
    """A chooser that records each thread call's asks; "boom" fails its own selection."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.catalogs = None

    def choose(self, text: str, uicontext: dict[str, Any] | None,
               env_id: str | None = None) -> TurnTools:
        if text == "boom":
            raise EmbeddingsUnavailable("endpoint down")
        time.sleep(0.002)
        return TurnTools(tools=[text, str(env_id)])


def test_turns_that_start_together_are_chosen_together_each_its_own() -> None:
    chooser = Counting()
    queue = SelectionQueue(chooser, max_batch=16)  # type: ignore[arg-type]
    seen: list[int] = []
    original = queue._choose_all

    def recorded(asks: list[Any]) -> list[Any]:
        seen.append(len(asks))
        return original(asks)

    queue._choose_all = recorded  # type: ignore[method-assign]

    async def burst() -> list[Any]:
        texts = [f"q{i}" if i != 7 else "boom" for i in range(60)]
        return await asyncio.gather(*(queue.choose(t, None, f"env{i}")
                                      for i, t in enumerate(texts)), return_exceptions=True)

    got = asyncio.run(burst())
    assert isinstance(got[7], EmbeddingsUnavailable)  # its own error only
    assert [g.tools for i, g in enumerate(got) if i != 7] == \
        [[f"q{i}", f"env{i}"] for i in range(60) if i != 7]
    assert seen == [16, 16, 16, 12]  # asked before the first call: in calls of max_batch

    async def lone() -> TurnTools:
        return await queue.choose("alone", None, None)

    seen.clear()
    assert asyncio.run(lone()).tools == ["alone", "None"] and seen == [1]


def test_a_burst_gets_the_tools_each_would_get_alone() -> None:
    """The real chooser (USE, the packaged catalog): a burst's selections, made in groups,
    are those made one at a time."""
    settings = AgentSettings()
    chooser = TurnToolChooser(settings, CatalogSource(settings.catalog_path))
    texts = ["выкатить дашборд 42 на прод", "echo 200 words", "find sales dashboards",
             "какое состояние у prod", "начни техработы на ss-stage", "что ты умеешь",
             "how is it doing", "обнови прод версией со стейджа"] * 4
    alone = [chooser.choose(t, None).tools for t in texts]
    queue = SelectionQueue(chooser)

    async def burst() -> list[TurnTools]:
        return await asyncio.gather(*(queue.choose(t, None, None) for t in texts))

    assert [t.tools for t in asyncio.run(burst())] == alone
