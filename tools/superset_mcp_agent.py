"""The AgentChat side of tools/superset_mcp.py: the calls it makes as our users, through a
chat turn (gradio_client, as the ss-tools frontend's @gradio/client does) and through the MCP
endpoint (the official `mcp.Client`), and the audit record it reads back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

ACCOUNT = "agentchat"  # Superset's MCP_DEV_USERNAME: the one account it runs every call as
# carol is a viewer (reads everywhere), alice an admin (destructive, with a card):
# agentchat/data/policy/policy.csv and the demo users.
USER, ADMIN = "carol", "alice"
SQL = {"env_id": "ss-dev", "request": {"database_id": 1, "limit": 5,
                                       "sql": "SELECT name, SUM(num) AS n FROM birth_names "
                                              "GROUP BY name ORDER BY n DESC LIMIT 5"}}
# A chat message per read tool, in the words the offline planner reads
# (agent/graph/offline/upstream_intents.py), and the same call's arguments over MCP.
CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("list superset dashboards in ss-dev", "superset__list_dashboards", {"request": {}}),
    ("superset dashboard 1 info in ss-dev", "superset__get_dashboard_info",
     {"request": {"identifier": 1}}),
    ("list superset charts about revenue in ss-dev", "superset__list_charts",
     {"request": {"search": "revenue"}}),
    ("superset chart 1 info in ss-dev", "superset__get_chart_info",
     {"request": {"identifier": 1}}),
    ("superset chart 8 data in ss-dev", "superset__get_chart_data",
     {"request": {"identifier": 8, "limit": 5}}),
    ("list superset datasets about sales in ss-dev", "superset__list_datasets",
     {"request": {"page_size": 5}}),
    ("superset dataset 1 info in ss-dev", "superset__get_dataset_info",
     {"request": {"identifier": 1}}),
    ("list superset databases in ss-dev", "superset__list_databases", {"request": {}}),
    ("superset instance info in ss-dev", "superset__get_instance_info", {}),
]


def say(text: str = "") -> None:
    print(text, flush=True)


def short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def chat_turn(agent: str, tok: str, text: str) -> dict[str, Any]:
    from gradio_client import Client

    client = Client(f"{agent}/api/agent/gradio", headers={"Authorization": f"Bearer {tok}"},
                    verbose=False)
    job = client.submit(text, None, None, api_name="/chat")
    job.result(timeout=120)
    seen: dict[int, dict[str, Any]] = {}
    for out in job.outputs():
        seen[out["metadata"]["seq"]] = out
    events = [seen[k] for k in sorted(seen)]
    say(f'\n> {USER}: "{text}"')
    for e in events:
        meta = e["metadata"]
        kind = meta.get("type")
        if kind == "tool_start":
            say(f"  tool_start {meta['tool']} {short(meta.get('input'), 200)}")
        elif kind == "tool_end":
            say(f"  tool_end   {meta['tool']} in {meta.get('duration_ms')} ms: "
                f"{short(meta.get('output'))}")
        elif kind in ("tool_error", "tool_timeout", "error"):
            say(f"  {kind} {short(meta)}")
    final = events[-1] if events else {}
    say(f"  answer: {short(final.get('content'), 300)}")
    return final


@asynccontextmanager
async def mcp_client(agent: str, tok: str) -> AsyncIterator[Any]:
    """The official MCP client on our endpoint."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {tok}"},
                                  timeout=120) as http:
        async with Client(streamable_http_client(f"{agent}/api/agent/mcp", http_client=http),
                          mode="2026-07-28", cache=None) as client:
            yield client


def ran_as(result: Any) -> str | None:
    """The Superset account a call ran as, where its answer says (get_instance_info)."""
    try:
        data = json.loads(getattr(result.content[0], "text", ""))
        inner = json.loads(data["content"][0]["text"]) if "content" in data else data
        user = inner["current_user"]
        return f"{user['username']!r} (id {user['id']})"
    except (ValueError, LookupError, TypeError):
        return None


def told(result: Any) -> str:
    texts = [getattr(b, "text", f"<{b.type}>") for b in result.content]
    return (" (is_error)" if result.is_error else "") + "\n    " + short(" ".join(texts))


def confirm_on_the_page(agent: str, tok: str) -> None:
    """What the call's page sends for its requester (docs/protocol.md §12): a destructive
    tool's card is answered by a person there, never inline by the client."""
    auth = {"Authorization": f"Bearer {tok}"}
    for call in httpx.get(f"{agent}/api/agent/calls", headers=auth, timeout=30).json()["items"]:
        say(f"  {ADMIN} confirms {call['call_id']} on the page ({call['prompt']})")
        done = httpx.post(f"{agent}/api/agent/calls/{call['call_id']}", headers=auth,
                          json={"decision": "confirm", "args_digest": call["args_digest"]},
                          timeout=120).json()
        say(f"    {done.get('status')}: {short(done.get('result') or done.get('error'))}")


async def mcp_calls(agent: str, tokens: dict[str, str]) -> None:
    async with mcp_client(agent, tokens[USER]) as client:
        listed = [t for t in (await client.list_tools()).tools
                  if t.name.startswith("superset__")]
        say(f"\n== AgentChat's MCP endpoint as {USER}: {len(listed)} Superset tools, our words")
        for t in listed:
            say(f"  {t.name}: {short(t.description, 110)}")
        for _, name, args in CALLS:
            result = await client.call_tool(name, {"env_id": "ss-dev", **args})
            say(f"\n  call {name} {json.dumps(args)}{told(result)}")
            who = ran_as(result)
            if who:
                say(f"    Superset's current_user for {USER}'s call: {who}")
        say(f"\n== execute_sql (destructive): {USER}, a viewer")
        result = await client.call_tool("superset__execute_sql", SQL)
        say(f"  {SQL['request']['sql']}{told(result)}")
    say(f"\n== execute_sql: {ADMIN}, an admin")
    async with mcp_client(agent, tokens[ADMIN]) as client:
        say(f"  {told(await client.call_tool('superset__execute_sql', SQL))}")


def audit_of(agent: str, tok: str) -> None:
    resp = httpx.get(f"{agent}/api/agent/audit", params={"tool": "superset__execute_sql"},
                     headers={"Authorization": f"Bearer {tok}"}, timeout=30)
    say(f"\n== Its audit record (GET /api/agent/audit?tool=superset__execute_sql: "
        f"{resp.status_code})")
    for record in resp.json().get("items", []):
        say(f"  owner {record['owner']}, tool {record['tool']}, environment "
            f"{record['environment']}, outcome {record['outcome']}")
        for stage in record["stages"]:
            say(f"    {stage['stage']}: {short(stage['detail'], 300)}")
    say(f"  (Superset ran it as its one account, {ACCOUNT!r}: MCP_DEV_USERNAME)")
