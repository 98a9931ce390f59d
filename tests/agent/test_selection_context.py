"""resolve_dashboard_refs: which dashboards the agent prefetches for a query and UIContext."""

from __future__ import annotations

from typing import Any

import pytest

from agentchat.agent.selection.context import refers_to_context
from agentchat.agent.selection.selector import resolve_dashboard_refs

DASH42: dict[str, Any] = {"objectType": "dashboard", "objectId": "42",
                          "objectName": "Отчёт по энергопотреблению", "envId": "ss-dev",
                          "route": "/dashboards/42", "contextVersion": 1}


@pytest.mark.parametrize(("query", "ids"), [
    ("задеплой дашборд 42 в прод", [42]),
    ("deploy dashboard #42 to prod", [42]),
    ("опубликуй версию 3 дашборда 12 в ss-stage", [12]),
    ("сравни дашборды 3, 4 и 5", [3, 4, 5]),
    ("dashboard id 77 health", [77]),
    ("отчёт 9 не грузится", [9]),
    # slang nouns for a dashboard: "борда", "дашик", "board"
    ("задеплой борду 42 на стейдж", [42]),
    ("скинь дашик 8", [8]),
    ("move board 5 to prod", [5]),
    ("сколько ждать по задаче 77", []),
    ("задеплой версию 3 на прод", []),
    ("дашборд 0", []),
    ("дашборд 99999999999", []),
])
def test_explicit_ids(query: str, ids: list[int]) -> None:
    assert resolve_dashboard_refs(query, None) == ids


@pytest.mark.parametrize("query", [
    "задеплой этот дашборд в прод",
    "Что я могу сделать с этим дашбордом?",
    "delete this dashboard",
    "ship this to production",
    "deploy it to ss-stage",
    "задеплой в прод",  # no object named at all: the page's object
    "хочу чтобы отчёт по энергопотреблению появился на проде",  # its name
    "migrate этот дашборд в prod",
])
def test_the_uicontext_dashboard(query: str) -> None:
    assert resolve_dashboard_refs(query, DASH42) == [42]


@pytest.mark.parametrize("query", [
    "найди дашборды про продажи",  # dashboards, but not this one
    "обнови этот датасет",  # another object type
    "спасибо",
])
def test_not_the_uicontext_dashboard(query: str) -> None:
    assert resolve_dashboard_refs(query, DASH42) == []


def test_explicit_id_wins_over_the_context() -> None:
    assert resolve_dashboard_refs("удали дашборд 7, а не этот", DASH42) == [7]


@pytest.mark.parametrize("ctx", [
    None,
    {},
    {**DASH42, "objectId": None},
    {**DASH42, "objectId": "abc"},
    {**DASH42, "objectType": "dataset"},
    {**DASH42, "objectType": None},
])
def test_no_usable_dashboard_in_the_context(ctx: dict[str, Any] | None) -> None:
    assert resolve_dashboard_refs("задеплой этот дашборд в прод", ctx) == []


def test_integer_object_id_is_accepted() -> None:
    assert resolve_dashboard_refs("this dashboard is slow", {**DASH42, "objectId": 42}) == [42]


def test_refers_to_a_dataset_context() -> None:
    ctx = {"objectType": "dataset", "objectId": "7", "objectName": "orders"}
    assert refers_to_context("что за данные в этом датасете?", ctx)
    assert refers_to_context("refresh it", ctx)
    assert not refers_to_context("найди дашборд выручки", ctx)
