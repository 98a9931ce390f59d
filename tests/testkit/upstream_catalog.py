"""Catalogs with upstream MCP tools for the tests: the shipped catalog plus an `upstreams`
section and entries whose pins are computed from what a test server really lists
(`UpstreamServer.definitions()`), as a platform engineer would write them.

    served = superset.definitions()
    pinned_catalog(tmp / "catalog.yaml", {"ss-dev": superset.url}, served)   # its reads
    catalog_with_upstreams(tmp, {"superset": upstream(superset.url)},
                           superset_entries("superset", {d["name"]: d for d in served}))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentchat.catalog_upstreams import definition_pin
from agentchat.settings import PACKAGE_DATA

ENVS = ["ss-dev", "ss-stage", "prod"]
ENV_ARG = {"type": "string", "enum": ENVS, "description": "environment"}
DASHBOARD_ID = {"type": "integer", "minimum": 1}


def upstream(url: str | dict[str, str], *, timeout_s: float = 5.0,
             auth: dict[str, Any] | None = None) -> dict[str, Any]:
    """An `upstreams` entry: one URL for every environment, or one per environment."""
    urls = url if isinstance(url, dict) else dict.fromkeys(ENVS, url)
    return {"url": urls, "timeout_s": timeout_s, "auth": auth or {"type": "none"}}


def entry(server: str, definition: dict[str, Any], *, tool: str | None = None,
          name: str | None = None, words: tuple[str, str] = ("суперсет", "superset"),
          title: tuple[str, str] | None = None, prompt: tuple[str, str] | None = None,
          risk: str = "read", args: dict[str, Any] | None = None,
          required: tuple[str, ...] = (), confirm_in: tuple[str, ...] = ()) -> dict[str, Any]:
    """A catalog entry for `definition` (the server's Tool JSON), ours in full and pinned to
    it, with an `env_id` environment argument. `tool`: the upstream's name for it (default
    the definition's); `name`: ours (default `<server>__<definition's name>`); `words`: (ru,
    en) keywords."""
    label = definition["name"].replace("_", " ")
    title = title or (f"Superset: {label}", f"Superset: {label}")
    prompt = prompt or (f"{title[0]} в {{env}}?", f"{title[1]} in {{env}}?")
    out: dict[str, Any] = {
        "name": name or f"{server}__{definition['name']}",
        "title": {"ru": title[0], "en": title[1]},
        "prompt": {"ru": prompt[0], "en": prompt[1]},
        "description": {"ru": title[0] + ".", "en": title[1] + "."},
        "keywords": {"ru": [words[0]], "en": [words[1]]},
        "args": {"type": "object", "additionalProperties": False,
                 "required": ["env_id", *required],
                 "properties": {"env_id": ENV_ARG, **(args or {})}},
        "environment": {"argument": "env_id"},
        "risk": risk,
        "upstream": {"server": server, "tool": tool or definition["name"],
                     "pin": definition_pin(definition)},
    }
    if confirm_in:
        out["confirm_in"] = list(confirm_in)
    return out


def superset_entries(server: str, defs: dict[str, dict[str, Any]],
                     confirm_in: tuple[str, ...] = ("prod",)) -> list[dict[str, Any]]:
    """Entries for the test server's three tools (testkit/upstream_server.py), with words a
    scripted turn selects them by: "superset" for the reads, "rename" for the write."""
    return [
        entry(server, defs["list_dashboards"],
              title=("Дашборды Superset", "Superset dashboards"),
              prompt=("Показать дашборды Superset в {env}?",
                      "List Superset dashboards in {env}?"),
              args={"search": {"type": "string", "maxLength": 100}}),
        entry(server, defs["get_dashboard_info"],
              title=("Дашборд Superset", "Superset dashboard info"),
              prompt=("Показать дашборд {dashboard} в {env}?",
                      "Show dashboard {dashboard} in {env}?"),
              args={"dashboard_id": DASHBOARD_ID}, required=("dashboard_id",)),
        entry(server, defs["update_dashboard"], words=("переименуй", "rename"),
              title=("Переименовать дашборд Superset", "Rename a Superset dashboard"),
              prompt=("Переименовать дашборд {dashboard} в {env} в «{dashboard_title}»?",
                      "Rename dashboard {dashboard} in {env} to {dashboard_title}?"),
              risk="write", confirm_in=confirm_in,
              args={"dashboard_id": DASHBOARD_ID,
                    "dashboard_title": {"type": "string", "minLength": 1, "maxLength": 100}},
              required=("dashboard_id", "dashboard_title")),
    ]


def catalog_with_upstreams(tmp: Path, upstreams: dict[str, dict[str, Any]],
                           tools: list[dict[str, Any]], name: str = "catalog.yaml") -> Path:
    """The shipped catalog with `upstreams` and `tools` added, written to `tmp / name`."""
    return _write(tmp / name, upstreams, tools)


def pinned_catalog(path: Path, urls: dict[str, str], served: list[dict[str, Any]],
                   entries: list[dict[str, Any]] | None = None, *,
                   server: str = "superset") -> Path:
    """The shipped catalog with one upstream (`server` at `urls`, auth none) and `entries`;
    by default an entry pinned to each read tool `served` lists (readOnlyHint)."""
    if entries is None:
        entries = [entry(server, d) for d in served
                   if (d.get("annotations") or {}).get("readOnlyHint")]
    return _write(path, {server: upstream(urls)}, entries)


def _write(path: Path, upstreams: dict[str, dict[str, Any]],
           tools: list[dict[str, Any]]) -> Path:
    raw = yaml.safe_load((PACKAGE_DATA / "catalog.yaml").read_text())
    raw["upstreams"] = upstreams
    raw["tools"] += tools
    fresh = path.with_suffix(".new")
    fresh.write_text(yaml.safe_dump(raw, allow_unicode=True))
    fresh.replace(path)  # a watcher never reads half a file
    return path
