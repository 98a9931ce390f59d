"""Tool selection within a context budget: which tool schemas the model sees for one turn.

`get_tools_for_query` follows the intent table of seeds/000 ("Tool Schema Context Budget"):

| intent | tools |
|---|---|
| capabilities / help | show_capabilities + matched intents |
| dashboard query, prefetch | show_capabilities + matched intents (no search_dashboards) |
| dashboard query, no prefetch | show_capabilities + search_dashboards + matched intents |
| maintenance | show_capabilities + the three maintenance tools + matched intents |
| unknown / general | show_capabilities + search, health, environments, task |

Keywords first (selection_keywords: word forms, inflection, typos); when they find fewer than
3 tools, the embedding fallback adds the 3 best other tools above a similarity threshold.
Rules the seed leaves open, decided: only tools the keywords name count toward the 3
(show_capabilities never; an intent's or the context's additions neither, nor a search
that prefetch suppresses); the intents
are taken from keyword and fallback tools alike (a fallback "start_maintenance" brings the
maintenance set); "unknown or general" is when neither finds a tool; prefetch suppresses
search_dashboards everywhere, the default set included; when the fallback cannot run, the
default set is added (wider, never narrower). A UIContext object the query refers to brings
its type's intent. `Selection.explain` says why, for the admin-only debug endpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pydantic import SecretStr

from agentchat.agent.selection.context import (
    context_object,
    refers_to_context,
    resolve_dashboard_refs,
)
from agentchat.agent.selection.embeddings import (
    Embedder,
    EmbeddingsUnavailable,
    ToolIndex,
    build_embedder,
)
from agentchat.agent.selection.keywords import KeywordMatcher, hits_by_tool
from agentchat.agent.selection.text import tokenize
from agentchat.catalog import Catalog, cached_catalog
from agentchat.settings import SharedSettings

__all__ = [
    "Selection",
    "SelectionSettings",
    "ToolSelector",
    "default_selector",
    "get_tools_for_query",
    "resolve_dashboard_refs",
]

log = logging.getLogger("agentchat.agent.selection.selector")

CAPABILITIES = "show_capabilities"
SEARCH_DASHBOARDS = "search_dashboards"
DEFAULT_SET = ("search_dashboards", "get_health_summary", "list_environments", "get_task_status")

# Intent of each tool. The catalog has no intent field; tools missing here have no intent.
TOOL_INTENT: dict[str, str] = {
    "show_capabilities": "capabilities",
    "search_dashboards": "dashboard", "get_dashboard": "dashboard",
    "export_config": "dashboard", "deploy_dashboard": "dashboard",
    "delete_dashboard": "dashboard",
    "list_maintenance_events": "maintenance", "start_maintenance": "maintenance",
    "end_maintenance": "maintenance",
    "list_databases": "database", "superset_explore_database": "database",
    "search_datasets": "dataset", "refresh_dataset": "dataset",
    "start_migration": "migration", "list_migrations": "migration",
    "list_environments": "environment", "get_health_summary": "health",
    "get_task_status": "task",
}
# What an intent brings besides its matched tools. Dashboard: the search (to find an id),
# unless prefetch; a migration moves a dashboard, so it needs the search as well.
# Dataset and migration objects from a UIContext bring the tool that looks them up.
INTENT_TOOLS: dict[str, tuple[str, ...]] = {
    "dashboard": (SEARCH_DASHBOARDS,),
    "maintenance": ("list_maintenance_events", "start_maintenance", "end_maintenance"),
}
CONTEXT_TOOLS: dict[str, tuple[str, ...]] = {
    "dashboard": (SEARCH_DASHBOARDS,),
    "dataset": ("search_datasets",),
    "migration": ("list_migrations",),
}
# Tools that act on a dashboard: when one is selected, the turn is a dashboard query.
DASHBOARD_ACTIONS = frozenset({"get_dashboard", "export_config", "deploy_dashboard",
                               "delete_dashboard", "start_migration"})


class SelectionSettings(SharedSettings):
    """Tool-selection settings (env prefix AGENTCHAT_); the agent's settings may extend it."""

    selection_embeddings: str = "use"
    # None: the backend's own tuned threshold.
    selection_threshold: float | None = None
    selection_min_tools: int = 3
    selection_fallback_top_k: int = 3
    selection_intent_bonus: float = 0.1
    embeddings_url: str | None = None
    embeddings_model: str | None = None
    embeddings_api_key: SecretStr | None = None
    embeddings_timeout_s: float = 2.0
    embeddings_query_prefix: str = ""
    embeddings_document_prefix: str = ""


@dataclass(frozen=True)
class Selection:
    tools: list[str]  # ordered as in the catalog, show_capabilities first
    explain: dict[str, Any] = field(default_factory=dict)


class ToolSelector:
    """Built once at start: the keyword matcher and the tool vectors for one catalog."""

    def __init__(self, catalog: Catalog, embedder: Embedder | None = None, *,
                 threshold: float | None = None, min_tools: int = 3, top_k: int = 3,
                 intent_bonus: float = 0.1, use_keywords: bool = True) -> None:
        self.catalog = catalog
        self.names = catalog.names
        self.matcher = KeywordMatcher(catalog)
        self.embedder = embedder
        self.threshold = threshold if threshold is not None else (
            embedder.default_threshold if embedder is not None else 1.0)
        self.min_tools = min_tools
        self.top_k = top_k
        self.intent_bonus = intent_bonus
        self.use_keywords = use_keywords
        self._index: ToolIndex | None = None
        self._index_lock = threading.Lock()
        if embedder is not None:
            try:
                self._tool_index()
            except EmbeddingsUnavailable as e:
                # Retried on the next fallback; the turn gets the default set meanwhile.
                log.warning("tool vectors not computed yet: %s", e)

    def _tool_index(self) -> ToolIndex:
        with self._index_lock:
            if self._index is None:
                assert self.embedder is not None
                self._index = ToolIndex(self.catalog, self.embedder,
                                        exclude=frozenset({CAPABILITIES}))
            return self._index

    def _known(self, names: list[str] | tuple[str, ...]) -> list[str]:
        return [n for n in names if n in self.names]

    def select(self, query: str, prefetch_available: bool = False,
               uicontext: Mapping[str, Any] | None = None) -> Selection:
        started = time.perf_counter()
        tokens = tokenize(query)
        hits = self.matcher.match(tokens) if self.use_keywords else []
        chosen: set[str] = {h.tool for h in hits}
        added: dict[str, str] = {}  # tool -> why, for tools no keyword named

        def add(names: list[str] | tuple[str, ...], why: str) -> None:
            for n in self._known(names):
                if n not in chosen:
                    chosen.add(n)
                    added[n] = why

        obj = context_object(uicontext)
        context_ref = obj is not None and refers_to_context(query, uicontext, tokens)
        context_intent = obj[0] if context_ref and obj is not None else None

        def expand() -> set[str]:
            intents = {TOOL_INTENT[t] for t in chosen if t in TOOL_INTENT}
            if chosen & DASHBOARD_ACTIONS:
                intents.add("dashboard")
            if context_intent:
                intents.add(context_intent)
                add(CONTEXT_TOOLS.get(context_intent, ()), f"context:{context_intent}")
            for intent in sorted(intents):
                add(INTENT_TOOLS.get(intent, ()), f"intent:{intent}")
            return intents

        def suppress() -> list[str]:
            if prefetch_available and SEARCH_DASHBOARDS in chosen:
                chosen.discard(SEARCH_DASHBOARDS)
                return [SEARCH_DASHBOARDS]
            return []

        intents = expand()
        suppressed = suppress()
        # What the keywords themselves named and the turn keeps: tools an intent or the context
        # brought along do not count (one maintenance word still lets the fallback look for
        # other intents), nor a search that prefetch suppressed ("дашборд 17" names one).
        keyword_count = len({h.tool for h in hits} - {CAPABILITIES} - set(suppressed))
        fallback: dict[str, Any] = {"ran": False}
        if keyword_count < self.min_tools and self.embedder is not None:
            fallback = self._fallback(query, chosen, prefetch_available, intents)
            add(fallback["added"], "fallback")
            intents |= expand()
            suppressed = sorted(set(suppressed) | set(suppress()))
        found_any = bool(chosen - {CAPABILITIES}) or bool(intents)
        general = not found_any or fallback.get("error") is not None
        if general:
            add(DEFAULT_SET, "default")
            suppressed = sorted(set(suppressed) | set(suppress()))
        chosen.add(CAPABILITIES)
        tools = [CAPABILITIES] + [n for n in self.names if n in chosen and n != CAPABILITIES]
        explain = {
            "intents": sorted(intents) or ["general"],
            "keyword_hits": hits_by_tool(hits),
            "added": added,
            "context": {"object": list(obj) if obj else None, "referenced": context_ref},
            "prefetch_available": prefetch_available,
            "suppressed": suppressed,
            "keyword_tools": keyword_count,
            "fallback": fallback,
            "general": general,
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        log.debug("tools for query: %s because %s", tools, explain)
        return Selection(tools=tools, explain=explain)

    def _fallback(self, query: str, chosen: set[str], prefetch: bool,
                  intents: set[str]) -> dict[str, Any]:
        assert self.embedder is not None
        out: dict[str, Any] = {"ran": True, "backend": self.embedder.name,
                               "threshold": self.threshold, "added": [], "error": None}
        try:
            raw = self._tool_index().scores(query)
        except EmbeddingsUnavailable as e:
            out["error"] = str(e)
            return out
        # Steer toward the intents already found (a keyword, the UIContext's object): their
        # other tools get a bonus, so "зарелизить этот отчёт" on a dashboard page finds the
        # dashboard's deploy rather than a dataset refresh.
        steer = intents - {"capabilities"}

        def steered(name: str) -> bool:
            # A migration moves a dashboard: the dashboard intent steers toward it as well.
            return TOOL_INTENT.get(name) in steer or (
                "dashboard" in steer and name in DASHBOARD_ACTIONS)

        scores = {n: round(s + (self.intent_bonus if steered(n) else 0.0), 4)
                  for n, s in raw.items()}
        scores = dict(sorted(scores.items(), key=lambda kv: -kv[1]))
        out["intent_bonus"] = {"intents": sorted(steer), "bonus": self.intent_bonus}
        out["scores"] = dict(list(scores.items())[:6])
        candidates = [
            name for name, score in scores.items()
            if score >= self.threshold and name not in chosen
            and not (prefetch and name == SEARCH_DASHBOARDS)
        ]
        out["added"] = candidates[: self.top_k]
        return out


def selector_from_settings(settings: SelectionSettings, catalog: Catalog | None = None
                           ) -> ToolSelector:
    key = settings.embeddings_api_key
    embedder = build_embedder(
        settings.selection_embeddings, base_url=settings.embeddings_url,
        model=settings.embeddings_model, api_key=key.get_secret_value() if key else None,
        timeout_s=settings.embeddings_timeout_s, threshold=settings.selection_threshold,
        query_prefix=settings.embeddings_query_prefix,
        document_prefix=settings.embeddings_document_prefix,
    )
    return ToolSelector(
        catalog or cached_catalog(str(settings.catalog_path)), embedder,
        threshold=settings.selection_threshold, min_tools=settings.selection_min_tools,
        top_k=settings.selection_fallback_top_k, intent_bonus=settings.selection_intent_bonus,
    )


@lru_cache(maxsize=1)
def default_selector() -> ToolSelector:
    """The process-wide selector from the environment's settings (built on first use; the
    agent calls this at start so the tool vectors are ready before the first turn)."""
    return selector_from_settings(SelectionSettings())


_custom: dict[tuple[int, int], tuple[Catalog, Embedder | None, ToolSelector]] = {}
_custom_lock = threading.Lock()


def get_tools_for_query(query: str, prefetch_available: bool = False,
                        uicontext: Mapping[str, Any] | None = None, *,
                        catalog: Catalog | None = None,
                        embedder: Embedder | None = None) -> Selection:
    """The tools for one turn. With `catalog` or `embedder`, a selector for them is built
    once and kept (keyed by identity); otherwise the default selector answers."""
    if catalog is None and embedder is None:
        return default_selector().select(query, prefetch_available, uicontext)
    cat = catalog or cached_catalog(str(SharedSettings().catalog_path))
    key = (id(cat), id(embedder))
    with _custom_lock:
        entry = _custom.get(key)
        if entry is None:
            if len(_custom) >= 8:
                _custom.pop(next(iter(_custom)))
            entry = (cat, embedder, ToolSelector(cat, embedder))
            _custom[key] = entry
    return entry[2].select(query, prefetch_available, uicontext)
