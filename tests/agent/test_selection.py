"""Tool selection: the intent table, the fallback trigger, prefetch suppression, word forms,
typos and the UIContext, through `ToolSelector.select` / `get_tools_for_query` with the real
catalog and the real offline embeddings (USE)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest

from agentchat.agent.selection.embeddings import DOCUMENT_BATCH, UseEmbedder, tool_texts
from agentchat.agent.selection.selector import (
    DEFAULT_SET,
    Selection,
    ToolSelector,
    get_tools_for_query,
)
from agentchat.catalog import Catalog, Examples, load_catalog
from agentchat.settings import PACKAGE_DATA

MAINTENANCE = {"list_maintenance_events", "start_maintenance", "end_maintenance"}
DASH42 = {"objectType": "dashboard", "objectId": "42",
          "objectName": "Отчёт по энергопотреблению", "envId": "ss-dev",
          "route": "/dashboards/42", "contextVersion": 1}
DATASET7 = {"objectType": "dataset", "objectId": "7", "objectName": "orders",
            "envId": "ss-stage", "route": "/datasets/7", "contextVersion": 1}
MIGRATION5 = {"objectType": "migration", "objectId": "5", "objectName": None,
              "envId": "prod", "route": "/migrations/5", "contextVersion": 1}


class Recording:
    """The real USE backend, counting what it is asked to embed."""

    def __init__(self, inner: UseEmbedder) -> None:
        self.inner = inner
        self.name = "recording-use"
        self.default_threshold = inner.default_threshold
        self.queries: list[str] = []
        self.document_batches: list[int] = []  # texts per embed_documents call

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.queries.extend(texts)
        return self.inner.embed_queries(texts)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.document_batches.append(len(texts))
        return self.inner.embed_documents(texts)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(PACKAGE_DATA / "catalog.yaml")


@pytest.fixture(scope="module")
def use() -> UseEmbedder:
    return UseEmbedder()


@pytest.fixture(scope="module")
def hybrid(catalog: Catalog, use: UseEmbedder) -> ToolSelector:
    return ToolSelector(catalog, use)


@pytest.fixture(scope="module")
def keywords(catalog: Catalog) -> ToolSelector:
    return ToolSelector(catalog, None)


def test_capabilities_row(hybrid: ToolSelector) -> None:
    sel = hybrid.select("что ты умеешь?")
    assert sel.tools[0] == "show_capabilities"
    assert "capabilities" in sel.explain["intents"]
    assert not sel.explain["general"]
    assert not set(DEFAULT_SET) <= set(sel.tools)


def test_dashboard_row_without_prefetch_brings_search(hybrid: ToolSelector) -> None:
    sel = hybrid.select("выкати отчёт на прод")
    assert {"search_dashboards", "deploy_dashboard"} <= set(sel.tools)
    assert "dashboard" in sel.explain["intents"]


def test_dashboard_row_with_prefetch_suppresses_search(hybrid: ToolSelector) -> None:
    sel = hybrid.select("задеплой этот дашборд в прод", True, DASH42)
    assert "deploy_dashboard" in sel.tools
    assert "search_dashboards" not in sel.tools
    assert sel.explain["suppressed"] == ["search_dashboards"]
    assert sel.explain["context"] == {"object": ["dashboard", "42"], "referenced": True}


def test_dashboard_action_alone_is_a_dashboard_query(keywords: ToolSelector) -> None:
    # No dashboard noun, only the verb: the search still comes, to find the id.
    sel = keywords.select("задеплой на прод")
    assert {"deploy_dashboard", "search_dashboards"} <= set(sel.tools)


@pytest.mark.parametrize("query", ["заверши техработы на ss-stage",
                                   "какие окна обслуживания запланированы?",
                                   "start a maintenance window on prod"])
def test_maintenance_row_brings_all_three(hybrid: ToolSelector, query: str) -> None:
    sel = hybrid.select(query)
    assert MAINTENANCE <= set(sel.tools)
    assert "maintenance" in sel.explain["intents"]


def test_general_row_is_the_default_set(keywords: ToolSelector, hybrid: ToolSelector) -> None:
    expected = ["show_capabilities", "list_environments", "search_dashboards",
                "get_health_summary", "get_task_status"]
    assert keywords.select("расскажи анекдот").tools == expected
    sel = hybrid.select("спасибо!")
    assert sel.tools == expected
    assert sel.explain["general"] and sel.explain["intents"] == ["general"]
    assert sel.explain["fallback"]["ran"] and sel.explain["fallback"]["added"] == []


def test_prefetch_suppresses_search_in_the_default_set(keywords: ToolSelector) -> None:
    sel = keywords.select("расскажи анекдот", True)
    assert "search_dashboards" not in sel.tools
    assert {"get_health_summary", "list_environments", "get_task_status"} <= set(sel.tools)


def test_prefetch_keeps_search_out_of_the_fallback(catalog: Catalog, use: UseEmbedder) -> None:
    low = ToolSelector(catalog, use, threshold=-1.0)  # every tool is above the threshold
    sel = low.select("find me something about revenue", True)
    assert "search_dashboards" not in sel.tools
    assert "search_dashboards" not in sel.explain["fallback"]["added"]
    assert len(sel.explain["fallback"]["added"]) == 3


def test_fallback_trigger_ignores_show_capabilities(catalog: Catalog, use: UseEmbedder) -> None:
    rec = Recording(use)
    sel = ToolSelector(catalog, rec)
    # Keywords find show_capabilities and two more tools: still fewer than 3, so it runs.
    result = sel.select("привет, обнови датасет")
    assert result.explain["keyword_tools"] == 2
    assert result.explain["fallback"]["ran"]
    assert rec.queries == ["привет, обнови датасет"]
    # Three tools from keywords (the maintenance set): no fallback, no embedding.
    result = sel.select("заверши техработы")
    assert result.explain["keyword_tools"] >= 3
    assert result.explain["fallback"] == {"ran": False}
    assert len(rec.queries) == 1


def test_fallback_trigger_counts_what_keywords_named(catalog: Catalog, use: UseEmbedder) -> None:
    """Tools an intent brings along do not count: one maintenance word names one tool, the
    intent adds the other two, and the fallback still looks for what else the turn needs."""
    rec = Recording(use)
    result = ToolSelector(catalog, rec).select("сними плашку")
    assert result.explain["keyword_tools"] == 1
    assert {"list_maintenance_events", "start_maintenance", "end_maintenance"} <= set(result.tools)
    assert result.explain["fallback"]["ran"] and rec.queries == ["сними плашку"]


def test_fallback_trigger_ignores_a_search_prefetch_suppressed(catalog: Catalog,
                                                                 use: UseEmbedder) -> None:
    """"дашборд 17" names search_dashboards, but with the summary prefetched the turn does not
    keep it, so it does not count: two kept keyword tools, and the fallback runs."""
    query = "на дашборде 17 что-то с данными, обнови датасет"
    rec = Recording(use)
    without = ToolSelector(catalog, rec).select(query)
    assert without.explain["keyword_tools"] == 3 and without.explain["fallback"] == {"ran": False}
    result = ToolSelector(catalog, rec).select(query, True)
    assert "search_dashboards" in result.explain["keyword_hits"]
    assert result.explain["suppressed"] == ["search_dashboards"]
    assert "search_dashboards" not in result.tools
    assert result.explain["keyword_tools"] == 2
    assert result.explain["fallback"]["ran"] and rec.queries == [query]


def test_fallback_adds_top_three_above_threshold(catalog: Catalog, use: UseEmbedder) -> None:
    sel = ToolSelector(catalog, use).select("нужно, чтобы пользователи не заходили пару часов")
    fb = sel.explain["fallback"]
    assert fb["ran"] and len(fb["added"]) <= 3
    for name in fb["added"]:
        assert fb["scores"][name] >= fb["threshold"]
        assert sel.explain["added"][name] == "fallback"
        assert name in sel.tools
    everything = ToolSelector(catalog, use, threshold=-1.0).select("что-то непонятное")
    assert len(everything.explain["fallback"]["added"]) == 3


def test_tool_vectors_are_computed_once(catalog: Catalog, use: UseEmbedder) -> None:
    rec = Recording(use)
    sel = ToolSelector(catalog, rec)
    # At start, before any query: every tool text once, in requests of at most DOCUMENT_BATCH.
    at_start = list(rec.document_batches)
    texts = sum(len(tool_texts(t)) for t in catalog.tools if t.name != "show_capabilities")
    assert sum(at_start) == texts and max(at_start) <= DOCUMENT_BATCH < texts
    for q in ("спасибо", "что-то странное", "расскажи анекдот"):
        sel.select(q)
    assert rec.document_batches == at_start
    assert len(rec.queries) == 3


@pytest.mark.parametrize(("query", "tool"), [
    ("покажи историю миграций", "list_migrations"),
    ("в списке дашбордов нет нужного", "search_dashboards"),
    ("нужно задеплоить новую версию", "deploy_dashboard"),
    ("какие окна обслуживания есть", "list_maintenance_events"),
    ("состоянием окружений интересуюсь", "list_environments"),
    ("ДЕПЛОЙ", "deploy_dashboard"),
    ("есть отчет по продажам?", "search_dashboards"),  # е for ё
    ("deployed dashboards", "deploy_dashboard"),
    # "-овать" verbs: infinitive and past meet the imperative keyword ("мигрируй")
    ("надо мигрировать дашборд на прод", "start_migration"),
    ("я уже скопировал его на стейдж?", "start_migration"),
    ("хочу опубликовать отчёт", "deploy_dashboard"),
    # slang and paraphrase keywords of the fifth round
    ("нужна борда по оттоку", "search_dashboards"),
    ("the report timed out twice", "get_health_summary"),
    ("доехало до стейджа?", "get_task_status"),
    ("закрой дев на полчаса", "start_maintenance"),
    # and of the sixth
    ("кликхаус подключен к проду?", "list_databases"),
    ("деплой завис уже час", "get_task_status"),
    ("закинь отчёт на стейдж", "deploy_dashboard"),
    ("какие контуры у нас есть", "list_environments"),
])
def test_russian_and_english_word_forms(keywords: ToolSelector, query: str, tool: str) -> None:
    sel = keywords.select(query)
    assert tool in sel.tools
    assert sel.explain["keyword_hits"][tool]


@pytest.mark.parametrize(("query", "tool"), [
    ("обнавить датасет 3 на стейдже", "refresh_dataset"),
    ("serach dashbords for churn", "search_dashboards"),
    ("stop the maintanance on stage", "end_maintenance"),
    ("экспртируй дашборд 15", "export_config"),
    ("helth check for stage", "get_health_summary"),
])
def test_typos(keywords: ToolSelector, query: str, tool: str) -> None:
    sel = keywords.select(query)
    assert tool in sel.tools
    assert any(h["how"] == "typo" for h in sel.explain["keyword_hits"][tool])


@pytest.mark.parametrize(("query", "tool"), [
    ("стейдж опять лежит", "get_health_summary"),
    ("is stage down?", "get_health_summary"),
    ("дев вообще жив?", "get_health_summary"),
    ("накатить отчёт на стейдж", "deploy_dashboard"),
    ("роллаут на прод", "deploy_dashboard"),
    ("повесь плашку на деве", "start_maintenance"),
    ("что по таске 9f?", "get_task_status"),
    ("has the job finished", "get_task_status"),
    ("мейнтенанса сегодня не будет?", "list_maintenance_events"),
])
def test_slang_and_paraphrase_keywords(keywords: ToolSelector, query: str, tool: str) -> None:
    # Round 3 (issue 7): words users wrote for these tools in the new dev queries.
    assert keywords.select(query).explain["keyword_hits"].get(tool)


@pytest.mark.parametrize("query", ["send feedback", "dbt models", "an envelope",
                                   "the environmentalist", "удивительно"])
def test_never_raw_substrings(keywords: ToolSelector, query: str) -> None:
    # "db" in "feedback"/"dbt", "env" in "envelope", "уда" in "удивительно" are not words.
    hits = keywords.select(query).explain["keyword_hits"]
    assert "list_databases" not in hits
    assert "list_environments" not in hits or query == "the environmentalist"
    assert "delete_dashboard" not in hits


@pytest.mark.parametrize(("query", "tool", "not_tool"), [
    ("deploy dashboard 4 to stage", "deploy_dashboard", "get_health_summary"),  # not "stale"
    ("выключи его", "end_maintenance", "start_maintenance"),  # not "включи"
])
def test_a_known_word_is_not_a_typo(keywords: ToolSelector, query: str, tool: str,
                                    not_tool: str) -> None:
    hits = keywords.select(query).explain["keyword_hits"]
    assert tool in hits and not_tool not in hits


def test_dataset_context_steers_to_dataset_tools(hybrid: ToolSelector) -> None:
    sel = hybrid.select("обнови его", False, DATASET7)
    assert {"refresh_dataset", "search_datasets"} <= set(sel.tools)
    assert sel.explain["context"]["referenced"]
    assert "dataset" in sel.explain["intents"]


def test_migration_context_steers_to_migration_tools(hybrid: ToolSelector) -> None:
    sel = hybrid.select("как там эта миграция?", False, MIGRATION5)
    assert "list_migrations" in sel.tools
    assert "migration" in sel.explain["intents"]


def test_context_not_referenced_changes_nothing(keywords: ToolSelector) -> None:
    # A dataset named explicitly on a dashboard page: the page's object is not meant.
    sel = keywords.select("обнови датасет заказов", False, DASH42)
    assert not sel.explain["context"]["referenced"]
    assert "search_dashboards" not in sel.tools


def test_explain_is_logged_at_debug(hybrid: ToolSelector, caplog: pytest.LogCaptureFixture
                                    ) -> None:
    with caplog.at_level(logging.DEBUG, logger="agentchat.agent.selection.selector"):
        sel = hybrid.select("выкати отчёт на прод")
    assert any("deploy_dashboard" in r.getMessage() and "keyword_hits" in r.getMessage()
               for r in caplog.records)
    for key in ("intents", "keyword_hits", "added", "fallback", "suppressed", "general"):
        assert key in sel.explain
    assert sel.explain["keyword_hits"]["deploy_dashboard"][0]["words"] == "выкати"


def test_get_tools_for_query_with_a_given_catalog(catalog: Catalog, use: UseEmbedder) -> None:
    sel = get_tools_for_query("выкати отчёт на прод", catalog=catalog, embedder=use)
    again = get_tools_for_query("выкати отчёт на прод", catalog=catalog, embedder=use)
    assert isinstance(sel, Selection) and sel.tools == again.tools
    assert sel.tools[0] == "show_capabilities"
    with pytest.raises(AttributeError):
        sel.tools = []  # type: ignore[misc]  # frozen


def _without_examples(catalog: Catalog) -> Catalog:
    return catalog.model_copy(update={"tools": [
        t.model_copy(update={"examples": Examples()}) for t in catalog.tools]})


@pytest.mark.parametrize(("query", "tool"), [
    # None of the tool's words; the catalog's example requests carry them to the fallback.
    ("нужно, чтобы пользователи не заходили в суперсет пару часов", "start_maintenance"),
    ("хочу чтобы отчёт по энергопотреблению появился на проде", "deploy_dashboard"),
])
def test_paraphrase_found_through_example_requests(catalog: Catalog, use: UseEmbedder,
                                                   query: str, tool: str) -> None:
    sel = ToolSelector(catalog, use).select(query)
    assert tool not in sel.explain["keyword_hits"]
    assert tool in sel.explain["fallback"]["added"] and tool in sel.tools
    # The same selector without the examples does not find it: they are what helps.
    assert tool not in ToolSelector(_without_examples(catalog), use).select(query).tools


def test_dashboard_intent_steers_toward_a_migration(catalog: Catalog, use: UseEmbedder
                                                    ) -> None:
    # A migration moves a dashboard: the dashboard intent's bonus reaches start_migration.
    query = "take the dashboard from dev and put it on stage"
    steered = ToolSelector(catalog, use).select(query)
    plain = ToolSelector(catalog, use, intent_bonus=0.0).select(query)
    bonus = steered.explain["fallback"]["intent_bonus"]["bonus"]
    assert "dashboard" in steered.explain["intents"]
    assert steered.explain["fallback"]["scores"]["start_migration"] == pytest.approx(
        plain.explain["fallback"]["scores"]["start_migration"] + bonus, abs=1e-3)
    assert "start_migration" in steered.tools
