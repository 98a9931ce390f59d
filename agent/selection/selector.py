"""Tool selection within a context budget: which tool schemas the model sees for one turn.

`get_tools_for_query` follows the intent table of docs/architecture.md, "Tool selection":

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
its type's intent. A message that names two environments names a migration between them
("обнови прод версией со стейджа", "make prod match stage"), whatever its verb; that tool
counts as named by keywords. One environment and no tool a keyword names ("глянь прод") asks
for its state: the health report is added (not counted, so the fallback still looks).
`Selection.explain` says why, for the admin-only debug endpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from opentelemetry import trace

from agentchat.agent.selection.context import (
    context_object,
    environments_named,
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
from agentchat.agent.settings import SelectionSettings
from agentchat.catalog import Catalog, cached_catalog
from agentchat.settings import SharedSettings

__all__ = [
    "Selection",
    "ToolSelector",
    "get_tools_for_query",
    "resolve_dashboard_refs",
    "selector_for",
]

log = logging.getLogger("agentchat.agent.selection.selector")
TRACER = trace.get_tracer("agentchat.agent")

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
# Two environments in one message: a dashboard goes from one to the other, whatever the verb
# ("обнови прод версией со стейджа", "sync stage with dev"): the migration moves it.
BETWEEN_ENVIRONMENTS = ("start_migration",)
# An environment and no tool named by a keyword ("глянь прод", "что там на деве?"): its state.
ENVIRONMENT_ALONE = ("get_health_summary",)
# Tools that act on a dashboard: when one is selected, the turn is a dashboard query.
DASHBOARD_ACTIONS = frozenset({"get_dashboard", "export_config", "deploy_dashboard",
                               "delete_dashboard", "start_migration"})


@dataclass(frozen=True)
class Selection:
    tools: list[str]  # ordered as in the catalog, show_capabilities first
    explain: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Choice:
    """One selection under way: the tools chosen so far, why each one no keyword named was
    added, the intents found and the search that prefetch suppressed."""

    known: Callable[[Iterable[str]], list[str]]
    chosen: set[str]
    prefetch: bool
    context_intent: str | None = None
    added: dict[str, str] = field(default_factory=dict)  # tool -> why
    intents: set[str] = field(default_factory=set)
    suppressed: list[str] = field(default_factory=list)

    def add(self, names: Iterable[str], why: str) -> None:
        for n in self.known(names):
            if n not in self.chosen:
                self.chosen.add(n)
                self.added[n] = why

    def expand(self) -> None:
        """The intents of the chosen tools and the context's object, and what they bring."""
        intents = {TOOL_INTENT[t] for t in self.chosen if t in TOOL_INTENT}
        if self.chosen & DASHBOARD_ACTIONS:
            intents.add("dashboard")
        if self.context_intent:
            intents.add(self.context_intent)
            self.add(CONTEXT_TOOLS.get(self.context_intent, ()), f"context:{self.context_intent}")
        for intent in sorted(intents):
            self.add(INTENT_TOOLS.get(intent, ()), f"intent:{intent}")
        self.intents |= intents

    def suppress(self) -> None:
        """With prefetch the dashboard is already known: no search for it."""
        if self.prefetch and SEARCH_DASHBOARDS in self.chosen:
            self.chosen.discard(SEARCH_DASHBOARDS)
            self.suppressed = sorted({*self.suppressed, SEARCH_DASHBOARDS})

    def widen_to_default(self, fallback: Mapping[str, Any]) -> bool:
        """Adds the default set when nothing was found or the fallback could not run; says
        whether it did (the turn is "general")."""
        found_any = bool(self.chosen - {CAPABILITIES}) or bool(self.intents)
        general = not found_any or fallback.get("error") is not None
        if general:
            self.add(DEFAULT_SET, "default")
            self.suppress()
        return general


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

    def _known(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n in self.names]

    def select(self, query: str, prefetch_available: bool = False,
               uicontext: Mapping[str, Any] | None = None) -> Selection:
        # A span of names and counts only: the query is the user's text and never leaves.
        with TRACER.start_as_current_span("agentchat.selection") as span:
            selection = self._select(query, prefetch_available, uicontext)
            span.set_attribute("agentchat.tools", selection.tools)
            span.set_attribute("agentchat.intents", selection.explain["intents"])
            fallback = selection.explain.get("fallback") or {}
            span.set_attribute("agentchat.fallback_ran", bool(fallback.get("ran")))
            span.set_attribute("agentchat.fallback_added", list(fallback.get("added") or []))
            span.set_attribute("agentchat.selection_ms", selection.explain["elapsed_ms"])
            return selection

    def _select(self, query: str, prefetch_available: bool,
                uicontext: Mapping[str, Any] | None) -> Selection:
        started = time.perf_counter()
        tokens = tokenize(query)
        hits = self.matcher.match(tokens) if self.use_keywords else []
        obj = context_object(uicontext)
        context_ref = obj is not None and refers_to_context(query, uicontext, tokens)
        envs = environments_named(tokens) if self.use_keywords else []
        named = {h.tool for h in hits}
        choice = _Choice(self._known, set(named), prefetch_available,
                         context_intent=obj[0] if context_ref and obj is not None else None)
        if len(envs) >= 2:
            choice.add(BETWEEN_ENVIRONMENTS, "environments:" + ",".join(envs))
            named |= set(self._known(BETWEEN_ENVIRONMENTS))
        elif envs and not named - {CAPABILITIES}:
            choice.add(ENVIRONMENT_ALONE, "environment:" + envs[0])
        choice.expand()
        choice.suppress()
        # What the keywords themselves named and the turn keeps: tools an intent or the context
        # brought along do not count (one maintenance word still lets the fallback look for
        # other intents), nor a search that prefetch suppressed ("дашборд 17" names one).
        keyword_count = len(named - {CAPABILITIES} - set(choice.suppressed))
        fallback = self._widen_by_fallback(query, choice, keyword_count)
        general = choice.widen_to_default(fallback)
        choice.chosen.add(CAPABILITIES)
        tools = [CAPABILITIES] + [n for n in self.names
                                  if n in choice.chosen and n != CAPABILITIES]
        explain = {
            "intents": sorted(choice.intents) or ["general"],
            "keyword_hits": hits_by_tool(hits),
            "added": choice.added,
            "context": {"object": list(obj) if obj else None, "referenced": context_ref},
            "environments": envs,
            "prefetch_available": prefetch_available,
            "suppressed": choice.suppressed,
            "keyword_tools": keyword_count,
            "fallback": fallback,
            "general": general,
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        log.debug("tools for query: %s because %s", tools, explain)
        return Selection(tools=tools, explain=explain)

    def _widen_by_fallback(self, query: str, choice: _Choice,
                           keyword_count: int) -> dict[str, Any]:
        """The embedding fallback when the keywords named fewer than `min_tools` tools."""
        if keyword_count >= self.min_tools or self.embedder is None:
            return {"ran": False}
        fallback = self._fallback(query, choice.chosen, choice.prefetch, choice.intents)
        choice.add(fallback["added"], "fallback")
        choice.expand()
        choice.suppress()
        return fallback

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
        steer = intents - {"capabilities"}
        scores = self._steered(raw, steer)
        out["intent_bonus"] = {"intents": sorted(steer), "bonus": self.intent_bonus}
        out["scores"] = dict(list(scores.items())[:6])
        candidates = [
            name for name, score in scores.items()
            if score >= self.threshold and name not in chosen
            and not (prefetch and name == SEARCH_DASHBOARDS)
        ]
        out["added"] = candidates[: self.top_k]
        return out

    def _steered(self, raw: Mapping[str, float], steer: set[str]) -> dict[str, float]:
        """Scores, best first, steered toward the intents already found (a keyword, the
        UIContext's object): their other tools get a bonus, so "зарелизить этот отчёт" on a
        dashboard page finds the dashboard's deploy rather than a dataset refresh."""

        def steered(name: str) -> bool:
            # A migration moves a dashboard: the dashboard intent steers toward it as well.
            return TOOL_INTENT.get(name) in steer or (
                "dashboard" in steer and name in DASHBOARD_ACTIONS)

        scores = {n: round(s + (self.intent_bonus if steered(n) else 0.0), 4)
                  for n, s in raw.items()}
        return dict(sorted(scores.items(), key=lambda kv: -kv[1]))


def _build_selector(settings: SelectionSettings | None, catalog: Catalog | None,
                    embedder: Embedder | None) -> ToolSelector:
    """A selector from the settings (the embedder too, unless one is given), or, without
    settings, for the given catalog and embedder with the selector's own defaults."""
    if settings is None:
        return ToolSelector(catalog or cached_catalog(str(SharedSettings().catalog_path)),
                            embedder)
    t = settings.tuning
    if embedder is None:
        key = t.embeddings_api_key
        embedder = build_embedder(
            t.selection_embeddings, base_url=t.embeddings_url, model=t.embeddings_model,
            api_key=key.get_secret_value() if key else None, timeout_s=t.embeddings_timeout_s,
            threshold=t.selection_threshold, query_prefix=t.embeddings_query_prefix,
            document_prefix=t.embeddings_document_prefix,
        )
    return ToolSelector(
        catalog or cached_catalog(str(settings.catalog_path)), embedder,
        threshold=t.selection_threshold, min_tools=t.selection_min_tools,
        top_k=t.selection_fallback_top_k, intent_bonus=t.selection_intent_bonus,
    )


_Key = tuple[int, int, int]
_selectors: OrderedDict[_Key, tuple[object, ToolSelector]] = OrderedDict()
_selectors_lock = threading.Lock()
_MAX_SELECTORS = 8


def selector_for(*, settings: SelectionSettings | None = None, catalog: Catalog | None = None,
                 embedder: Embedder | None = None) -> ToolSelector:
    """The selector `get_tools_for_query` uses for these arguments: built on first use (the
    tool vectors are computed then) and kept, keyed by the arguments' identity; with none,
    the process-wide one from the environment's settings."""
    if settings is None and catalog is None and embedder is None:
        settings = _environment_settings()
    key = (id(settings), id(catalog), id(embedder))
    with _selectors_lock:
        entry = _selectors.get(key)
        if entry is None:
            # The arguments stay referenced with their selector, so no id is reused meanwhile.
            entry = ((settings, catalog, embedder), _build_selector(settings, catalog, embedder))
            _selectors[key] = entry
            while len(_selectors) > _MAX_SELECTORS:
                _selectors.popitem(last=False)
        _selectors.move_to_end(key)
        return entry[1]


@lru_cache(maxsize=1)
def _environment_settings() -> SelectionSettings:
    return SelectionSettings()


def get_tools_for_query(query: str, prefetch_available: bool = False,
                        uicontext: Mapping[str, Any] | None = None, *,
                        settings: SelectionSettings | None = None,
                        catalog: Catalog | None = None,
                        embedder: Embedder | None = None) -> Selection:
    """The tools for one turn (the seed's name; the agent selects through it). `settings`,
    `catalog` and `embedder` pick the selector (`selector_for`); none: the environment's."""
    return selector_for(settings=settings, catalog=catalog, embedder=embedder).select(
        query, prefetch_available, uicontext)
