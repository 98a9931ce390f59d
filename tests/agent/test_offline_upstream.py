"""The offline planner and the shipped Superset entries (docs/upstreams.md): a message that
names the server picks its tool by the upstream tool's own name words, and fills Superset's
`request` object from the words; a message that does not name it never reaches another team's
server. The tools are bound as the agent offers them (agent/graph/calls.py `tool_schemas`),
after the selection chose them by the entries' keywords."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import mcp_types as types
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from agentchat.agent.gate.upstream_calls import result_json
from agentchat.agent.graph.calls import tool_schemas
from agentchat.agent.graph.offline.planner import OfflinePlanner
from agentchat.agent.graph.offline.upstream_intents import upstream_intent
from agentchat.agent.selection.selector import ToolSelector
from agentchat.catalog import Catalog, parse_catalog
from testkit.shipped_superset import shipped_superset

CATALOG: Catalog = parse_catalog(shipped_superset().encode(), "catalog.yaml")


def planned(text: str, lang: str = "en") -> list[dict[str, Any]]:
    """The calls the planner makes for `text` with the tools the selection offers for it."""
    offered = ToolSelector(CATALOG, None).select(text).tools
    tools = tool_schemas(CATALOG, offered, lang)  # type: ignore[arg-type]
    plan = OfflinePlanner().bind_tools(tools).invoke([HumanMessage(text, id="h1")])
    assert isinstance(plan, AIMessage)
    return [{"name": c["name"], "args": c["args"]} for c in plan.tool_calls]


@pytest.mark.parametrize(("text", "name", "args"), [
    ("list superset dashboards about sales in ss-dev", "superset__list_dashboards",
     {"env_id": "ss-dev", "request": {"search": "sales"}}),
    ("list superset dashboards in prod", "superset__list_dashboards",
     {"env_id": "prod", "request": {}}),
    ("superset dashboard 3 info", "superset__get_dashboard_info",
     {"env_id": "ss-dev", "request": {"identifier": 3}}),
    ("superset chart 12 data in ss-stage", "superset__get_chart_data",
     {"env_id": "ss-stage", "request": {"identifier": 12}}),
    ("list superset datasets", "superset__list_datasets", {"env_id": "ss-dev", "request": {}}),
    ("superset instance info", "superset__get_instance_info", {"env_id": "ss-dev"}),
])
def test_a_message_naming_superset_calls_its_tool_with_our_schema(
        text: str, name: str, args: dict[str, Any]) -> None:
    assert planned(text) == [{"name": name, "args": args}]
    # What it planned passes our schema, which the gate validates before sending.
    tool = CATALOG.get(name)
    assert tool is not None
    jsonschema.validate(args, tool.args)


def test_without_the_servers_name_our_own_tools_answer() -> None:
    [call] = planned("find sales dashboards in ss-dev")
    assert call["name"] == "search_dashboards"
    assert upstream_intent("find sales dashboards", set(CATALOG.names)) is None
    # A word the server's tools share is not its name.
    assert upstream_intent("show superset environments", set(CATALOG.names)) is None


def test_a_required_id_the_message_lacks_plans_no_call() -> None:
    assert not [c for c in planned("superset dashboard info") if c["name"].startswith(
        "superset__get")]


def test_execute_sql_is_off_even_with_the_reads_on() -> None:
    reads = parse_catalog(shipped_superset(["superset tools", "superset upstream"]).encode(),
                          "catalog.yaml")
    assert "superset__execute_sql" not in reads.names
    sql = CATALOG.get("superset__execute_sql")
    assert sql is not None and sql.risk == "destructive" and sql.needs_card("ss-dev")


def as_the_model_reads(answer: dict[str, Any]) -> str:
    """Superset's answer (one text block of JSON) as the gate hands it to the model."""
    result = types.CallToolResult(content=[types.TextContent(type="text",
                                                             text=json.dumps(answer))])
    return json.dumps(result_json(result, 10**6), ensure_ascii=False)


def test_the_answer_names_what_superset_listed() -> None:
    """Superset answers one text block of JSON, its list under its own key: the planner's
    answer counts and names the items, in the turn's language, by our tool's title."""
    listed = {"dashboards": [{"id": 1, "dashboard_title": "Sales Dashboard"},
                             {"id": 3, "dashboard_title": "Video Game Sales"}], "count": 2}
    text = "list superset dashboards"
    [call] = planned(text)
    tools = tool_schemas(CATALOG, [call["name"]], "en")
    thread = [HumanMessage(text, id="h1"),
              AIMessage("", tool_calls=[{**call, "id": "c1", "type": "tool_call"}]),
              ToolMessage(as_the_model_reads(listed), tool_call_id="c1", name=call["name"])]
    answer = OfflinePlanner().bind_tools(tools).invoke(thread)
    assert answer.content == ("“Superset dashboards”: 2 found.\n- “Sales Dashboard” (#1)\n"
                              "- “Video Game Sales” (#3)")


def test_one_object_is_told_by_its_name_and_number() -> None:
    from agentchat.agent.graph.offline.answers import summarize
    from agentchat.agent.graph.offline.said import Said

    dataset = {"id": 1, "table_name": "bart_lines", "columns": [{"name": "color"}]}
    result = ToolMessage(as_the_model_reads(dataset), tool_call_id="c1")
    said = Said("en", {"superset__get_dataset_info": "Superset dataset details"}, {})
    assert summarize(result, "superset__get_dataset_info", said) == (
        "“Superset dataset details”: “bart_lines” (#1).")
