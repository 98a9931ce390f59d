"""Tool selection on colloquial phrasing (issue 32, item 8): keyword frames with a gap ("как …
там", "how is … doing"), the environments a message names, a message that names two of them as
a migration between them and one that names an environment alone as a question about its
state; each through `ToolSelector.select` with the shipped catalog, and hostile text in linear
time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentchat.agent.selection.context import environments_named
from agentchat.agent.selection.embeddings import tool_texts
from agentchat.agent.selection.keywords import MAX_GAP, KeywordMatcher
from agentchat.agent.selection.selector import ToolSelector
from agentchat.agent.selection.text import tokenize
from agentchat.catalog import Catalog, load_catalog
from agentchat.settings import PACKAGE_DATA

SHIPPED = PACKAGE_DATA / "catalog.yaml"
HEALTH = "get_health_summary"
MIGRATION = "start_migration"
DASH42 = {"objectType": "dashboard", "objectId": "42", "objectName": "Отчёт по продажам",
          "envId": "ss-dev", "route": "/dashboards/42", "contextVersion": 1}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(SHIPPED)


@pytest.fixture(scope="module")
def keywords(catalog: Catalog) -> ToolSelector:
    return ToolSelector(catalog, None)


@pytest.mark.parametrize(("query", "words"), [
    ("как там прод?", "как там"),
    ("как он там?", "как он там"),
    ("ну как стейдж там, живой?", "как стейдж там"),
    ("how is prod doing", "how is prod doing"),
    ("how's the sales board doing on prod", "how s the sales board doing"),
    ("how are things on stage", "how are things"),
])
def test_a_frame_meets_its_words_with_the_subject_inside(keywords: ToolSelector, query: str,
                                                          words: str) -> None:
    hits = keywords.select(query).explain["keyword_hits"][HEALTH]
    assert words in [h["words"] for h in hits]


@pytest.mark.parametrize("query", [
    "how do I export a dashboard",  # "how … doing" needs its "is"; "do" is not "doing"
    "как выгрузить дашборд",  # "как" alone is no frame
    "is the export done",
])
def test_a_frame_needs_all_its_words(keywords: ToolSelector, query: str) -> None:
    assert HEALTH not in keywords.select(query).explain["keyword_hits"]


def test_a_gap_holds_at_most_max_gap_words(keywords: ToolSelector) -> None:
    inside = " ".join(["очень"] * MAX_GAP)
    assert HEALTH in keywords.select(f"как {inside} там").explain["keyword_hits"]
    assert HEALTH not in keywords.select(f"как {inside} очень там").explain["keyword_hits"]


def test_a_frame_on_a_dashboards_page_is_about_its_health(catalog: Catalog) -> None:
    # "как он там" on the dashboard's page: the dashboard's health (prefetch has its summary).
    sel = ToolSelector(catalog, None).select("ну как он там сегодня?", True, DASH42)
    assert HEALTH in sel.tools and sel.explain["context"]["referenced"]


def test_gap_marks_are_not_words_for_the_embeddings(catalog: Catalog) -> None:
    health = catalog.get(HEALTH)
    assert health is not None and any("…" in k for k in health.keywords.ru)
    texts = tool_texts(health)
    assert not any("…" in t or "..." in t for t in texts)
    assert "как там" in texts[2]


@pytest.mark.parametrize("keyword", ["… там", "как …", "как … … там", "…"])
def test_a_gap_must_stand_between_words(tmp_path: Path, keyword: str) -> None:
    text = SHIPPED.read_text(encoding="utf-8").replace(
        "ru: [здоровье, ", f"ru: [\"{keyword}\", здоровье, ", 1)
    path = tmp_path / "catalog.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"get_health_summary.*gap must stand between words"):
        KeywordMatcher(load_catalog(path))


@pytest.mark.parametrize(("query", "envs"), [
    ("обнови прод версией со стейджа", ["prod", "ss-stage"]),
    ("на проде и на деве", ["prod", "ss-dev"]),
    ("стейджевую версию на продакшене", ["ss-stage", "prod"]),
    ("make production match staging", ["prod", "ss-stage"]),
    ("ss-dev, stage's copy", ["ss-dev", "ss-stage"]),
    ("продажи за девять месяцев, products", []),  # words that start like one are not
])
def test_environments_named(query: str, envs: list[str]) -> None:
    assert environments_named(tokenize(query)) == envs


@pytest.mark.parametrize("query", [
    "обнови прод версией со стейджа",
    "update prod with stage's version",
    "make dev look like staging for dashboard 7",
])
def test_two_environments_name_a_migration(keywords: ToolSelector, query: str) -> None:
    sel = keywords.select(query)
    assert MIGRATION in sel.tools
    assert MIGRATION not in sel.explain["keyword_hits"]
    assert sel.explain["added"][MIGRATION].startswith("environments:")
    assert len(sel.explain["environments"]) == 2


def test_two_environments_count_as_named(catalog: Catalog) -> None:
    """The migration counts toward the fallback's 3 like a keyword's tool: with it, "обнови
    датасет ... на проде со стейджа" has three named tools and no fallback runs."""
    one = ToolSelector(catalog, None).select("обнови датасет 3 на проде")
    two = ToolSelector(catalog, None).select("обнови датасет 3 на проде со стейджа")
    assert MIGRATION not in one.tools and one.explain["environments"] == ["prod"]
    assert two.explain["keyword_tools"] == one.explain["keyword_tools"] + 1


def test_one_environment_is_no_migration(keywords: ToolSelector) -> None:
    sel = keywords.select("как там прод?")
    assert MIGRATION not in sel.tools and HEALTH in sel.tools


@pytest.mark.parametrize("query", ["глянь прод", "how's stage?", "что там на деве"])
def test_an_environment_alone_asks_for_its_state(keywords: ToolSelector, query: str) -> None:
    sel = keywords.select(query)
    assert not sel.explain["keyword_hits"]
    assert sel.explain["added"][HEALTH].startswith("environment:")


def test_an_environment_beside_a_named_tool_brings_nothing(keywords: ToolSelector) -> None:
    sel = keywords.select("покажи дашборды на проде")
    assert "search_dashboards" in sel.explain["keyword_hits"]
    assert HEALTH not in sel.tools


@pytest.mark.parametrize("piece", ["как ", "как там ", "как он ", "how is ", "how s the ",
                                   "прод стейдж ", "деве стейджа ", "как … там "])
def test_hostile_text_costs_linear_time(keywords: ToolSelector, piece: str) -> None:
    """16 KB of frame and environment words: each word is looked up once, each phrase tries
    at most MAX_GAP + 1 positions a word (here 16 KB takes 3-55 ms, 1 KB a sixteenth of that).
    Generous liveness bounds on a shared machine: under a second, and 16 times the text not
    over 64 times the time of 1 KB (with a 5 ms floor, so load spikes on the short text do
    not fail it; a quadratic matcher costs 256 times)."""
    short = (piece * (1024 // len(piece) + 1))[:1024]
    long = (piece * (16384 // len(piece) + 1))[:16384]
    keywords.select(short)  # warm the stem cache

    def best_of_3(text: str) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            keywords.select(text)
            times.append(time.perf_counter() - started)
        return min(times)

    short_s, long_s = best_of_3(short), best_of_3(long)
    assert long_s < 1.0
    assert long_s < 64 * max(short_s, 0.005)


@pytest.mark.parametrize(("query", "tool"), [
    # General words of the eighth round (issue 32), each with its English or Russian pair.
    ("откати дашборд 5 на прошлую версию", "deploy_dashboard"),
    ("revert board 5 on prod", "deploy_dashboard"),
    ("take the funnel board live", "deploy_dashboard"),
    ("прод работоспособен после апдейта?", HEALTH),
    ("did stage recover", HEALTH),
    ("заблокируй вход на дев", "start_maintenance"),
    ("lift the lock on stage", "end_maintenance"),
    ("скачай конфиг отчёта", "export_config"),
    ("trash that board", "delete_dashboard"),
    ("перезалей датасет", "refresh_dataset"),
])
def test_general_words(keywords: ToolSelector, query: str, tool: str) -> None:
    assert keywords.select(query).explain["keyword_hits"].get(tool)
