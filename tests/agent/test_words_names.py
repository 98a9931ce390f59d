"""Which object names a card or an answer may show (agent/graph/names.py): only those that
successful ss-tools results in the thread carry, or the UIContext's for its own object."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, ToolMessage

from agentchat.agent.graph.names import known_names, names_for_call
from agentchat.catalog import load_catalog
from agentchat.settings import PACKAGE_DATA

CATALOG = load_catalog(PACKAGE_DATA / "catalog.yaml")


def thread() -> list[object]:
    calls = [{"name": "get_dashboard", "args": {"dashboard_id": 42}, "id": "c1"},
             {"name": "search_dashboards", "args": {"env_id": "prod"}, "id": "c2"},
             {"name": "get_health_summary", "args": {"env_id": "prod"}, "id": "c3"}]
    summary = {"id": 42, "title": "Отчёт", "title_en": "Report",
               "datasets": [{"id": 8, "name": "energy_consumption"}]}
    return [
        AIMessage("", tool_calls=calls),
        ToolMessage(json.dumps(summary, ensure_ascii=False), tool_call_id="c1"),  # no name
        # a failed call's text never names anything
        ToolMessage('{"id": 7, "title": "from an error"}', tool_call_id="c2",
                    name="search_dashboards", status="error"),
        ToolMessage(json.dumps({"problems": [{"dashboard_id": 5, "title": "Склад"}]}),
                    tool_call_id="c3", name="get_health_summary"),
    ]


def test_names_come_from_successful_results_by_kind_and_language() -> None:
    ru = known_names(thread(), CATALOG, "ru")  # type: ignore[arg-type]
    assert ru == {("dashboard", "42"): "Отчёт", ("dashboard", "5"): "Склад"}
    en = known_names(thread(), CATALOG, "en")  # type: ignore[arg-type]
    assert en[("dashboard", "42")] == "Report"


def test_the_uicontext_name_only_for_the_object_it_shows() -> None:
    ui = {"objectType": "dataset", "objectId": "3", "objectName": "Платежи"}
    assert names_for_call({"dataset_id": 3}, {}, ui) == {"dataset": "Платежи"}
    assert names_for_call({"dataset_id": 4}, {}, ui) == {}
    assert names_for_call({"dashboard_id": 3}, {}, ui) == {}
    # a name the results carry wins over the page's
    known = {("dataset", "3"): "payments"}
    assert names_for_call({"dataset_id": 3}, known, ui) == {"dataset": "payments"}
