"""The selection's query batcher (agent/selection/embeddings.py QueryBatcher): turns that start
together share one embedding call, each gets its own row, and a lone query is embedded alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agentchat.agent.selection.embeddings import (
    EmbeddingsUnavailable,
    QueryBatcher,
    ToolIndex,
    UseEmbedder,
)
from agentchat.catalog import load_catalog
from agentchat.settings import PACKAGE_DATA


class Slow:
    """A row per text (its length and a hash), each call taking `delay_s`; records batches."""

    name = "slow"
    default_threshold = 0.5

    def __init__(self, delay_s: float = 0.05, fail: bool = False) -> None:
        self.delay_s, self.fail = delay_s, fail
        self.batches: list[list[str]] = []
        self._lock = threading.Lock()
        self.running = 0
        self.most_running = 0

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.batches.append(list(texts))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            time.sleep(self.delay_s)
            if self.fail:
                raise EmbeddingsUnavailable("endpoint down")
            return np.array([[len(t), hash(t) % 1000] for t in texts], dtype=np.float32)
        finally:
            with self._lock:
                self.running -= 1

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_queries(texts)


def expected(text: str) -> list[float]:
    return [float(len(text)), float(hash(text) % 1000)]


def test_a_lone_query_is_one_call_at_once() -> None:
    slow = Slow(delay_s=0.0)
    batcher = QueryBatcher(slow)
    for text in ("a", "bb", "ccc"):
        assert batcher.embed(text).tolist() == expected(text)
    assert slow.batches == [["a"], ["bb"], ["ccc"]]


def test_concurrent_queries_share_calls_and_each_gets_its_row() -> None:
    slow = Slow(delay_s=0.05)
    batcher = QueryBatcher(slow, max_batch=8)
    texts = [f"query {i}" * (i % 5 + 1) for i in range(40)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        rows = list(pool.map(batcher.embed, texts))
    assert [r.tolist() for r in rows] == [expected(t) for t in texts]
    assert sorted(t for b in slow.batches for t in b) == sorted(texts)  # each once
    assert len(slow.batches) < len(texts) / 2  # batched
    assert max(len(b) for b in slow.batches) <= 8
    assert slow.most_running == 1  # one call at a time
    # Nothing left waiting: the next lone query is a call of its own.
    slow.batches.clear()
    assert batcher.embed("last").tolist() == expected("last")
    assert slow.batches == [["last"]]


def test_every_caller_of_a_failed_batch_gets_the_error_and_the_next_works() -> None:
    slow = Slow(delay_s=0.05, fail=True)
    batcher = QueryBatcher(slow)
    errors: list[str] = []

    def one(text: str) -> None:
        try:
            batcher.embed(text)
        except EmbeddingsUnavailable as e:
            errors.append(str(e))

    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(one, [str(i) for i in range(10)]))
    assert errors == ["endpoint down"] * 10
    slow.fail = False
    assert batcher.embed("ok").tolist() == expected("ok")


@pytest.mark.parametrize("workers", [1, 6])
def test_use_scores_are_the_same_batched(workers: int) -> None:
    """The real backend: scores of queries embedded together are those of each alone (to the
    4 decimals they are rounded to)."""
    index = ToolIndex(load_catalog(PACKAGE_DATA / "catalog.yaml"), UseEmbedder())
    queries = ["выкатить дашборд на прод", "echo 200 words", "find sales dashboards",
               "какое состояние у prod", "начни техработы на ss-stage", "что ты умеешь"] * 3
    alone = [index.scores(q) for q in queries]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        together = list(pool.map(index.scores, queries))
    assert together == alone
