"""Which tools the model sees this turn, and what the agent prefetches before it (issue 7).

Prefetch is an ordinary tool call (`get_dashboard`) made by the agent before the model: it
goes through the policy gate, carries both tokens, is audited and streams tool events.

A selection is CPU work on the user's text (the query's embedding, ~1.7 ms with USE): it runs
in a worker thread, never on the event loop. Turns that start together queue on the loop
(`SelectionQueue`) and go to one thread call together, their embeddings in one backend call,
so a burst neither fills the default thread pool (where LangGraph and psycopg's helpers wait
too) nor pays one embedding call a turn.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentchat.agent.selection.context import resolve_dashboard_refs
from agentchat.agent.selection.embeddings import MAX_QUERY_BATCH, together
from agentchat.agent.selection.selector import get_tools_for_query, selector_for
from agentchat.agent.settings import AgentSettings
from agentchat.catalog import Catalog
from agentchat.catalog_source import CatalogSource

log = logging.getLogger("agentchat.agent.selection.selector")
PREFETCH_TOOL = "get_dashboard"
MAX_PREFETCH = 3


@dataclass(frozen=True)
class TurnTools:
    tools: list[str]
    prefetch: list[dict[str, Any]] = field(default_factory=list)
    explain: dict[str, Any] = field(default_factory=dict)


class TurnToolChooser:
    """Decides a turn's tools: the prefetch calls its dashboard references ask for, then the
    tools offered to the model, through `get_tools_for_query`. Built once at start, when the
    selector for these settings is built and its tool vectors computed."""

    def __init__(self, settings: AgentSettings, catalogs: CatalogSource) -> None:
        self.settings = settings
        self.catalogs = catalogs
        selector_for(settings=settings, catalog=catalogs.current())

    @property
    def catalog(self) -> Catalog:
        """The catalog as reloaded (a new revision's tool vectors are computed on its first
        turn, in the selection's worker thread)."""
        return self.catalogs.current()

    def choose(self, text: str, uicontext: dict[str, Any] | None,
               env_id: str | None = None) -> TurnTools:
        prefetch = self._prefetch_calls(text, uicontext)
        selection = get_tools_for_query(text, bool(prefetch), uicontext,
                                        settings=self.settings, catalog=self.catalog)
        explain = {**selection.explain, "prefetch": [p["args"] for p in prefetch]}
        log.debug("selected %s for %r: %s", selection.tools, text[:80], explain)
        return TurnTools(tools=list(selection.tools), prefetch=prefetch, explain=explain)

    def _prefetch_calls(self, text: str, uicontext: dict[str, Any] | None
                        ) -> list[dict[str, Any]]:
        """A `get_dashboard` call per dashboard the turn refers to (at most MAX_PREFETCH)."""
        if self.catalog.get(PREFETCH_TOOL) is None:
            return []
        refs = resolve_dashboard_refs(text, uicontext)[:MAX_PREFETCH]
        # get_dashboard reads across environments (the catalog gives it no environment).
        return [{"name": PREFETCH_TOOL, "id": "call_pf_" + uuid.uuid4().hex[:16],
                 "args": {"dashboard_id": ref}} for ref in refs]



Ask = tuple[str, dict[str, Any] | None, str | None]  # text, UIContext, environment


class SelectionQueue:
    """`await choose(...)` from the event loop: the selections asked while one thread call
    runs go together in the next (up to MAX_QUERY_BATCH), each answered with its own tools or
    its own error. One call at a time; a lone turn's call starts at once."""

    def __init__(self, chooser: TurnToolChooser, max_batch: int = MAX_QUERY_BATCH) -> None:
        self.chooser = chooser
        self.max_batch = max_batch
        self._waiting: list[tuple[Ask, asyncio.Future[TurnTools]]] = []
        self._task: asyncio.Task[None] | None = None

    async def choose(self, text: str, uicontext: dict[str, Any] | None,
                     env_id: str | None) -> TurnTools:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[TurnTools] = loop.create_future()
        self._waiting.append(((text, uicontext, env_id), answer))
        if self._task is None:
            self._task = loop.create_task(self._drain(), name="tool-selection")
        return await answer

    async def _drain(self) -> None:
        batch: list[tuple[Ask, asyncio.Future[TurnTools]]] = []
        try:
            while self._waiting:
                batch = self._waiting[:self.max_batch]
                del self._waiting[:self.max_batch]
                answers = await asyncio.to_thread(self._choose_all, [ask for ask, _ in batch])
                for (_, answer), got in zip(batch, answers, strict=True):
                    if answer.done():  # its turn was cancelled meanwhile
                        continue
                    if isinstance(got, Exception):
                        answer.set_exception(got)
                    else:
                        answer.set_result(got)
                batch = []
        finally:  # cancelled (the loop is closing): nobody waits forever
            for _, answer in batch + self._waiting:
                answer.cancel()
            self._waiting.clear()
            self._task = None

    def _choose_all(self, asks: list[Ask]) -> list[TurnTools | Exception]:
        out: list[TurnTools | Exception] = []
        with together([text for text, _, _ in asks]):
            for ask in asks:
                try:
                    out.append(self.chooser.choose(*ask))
                except Exception as e:  # this turn's error, not its neighbours'
                    out.append(e)
        return out
