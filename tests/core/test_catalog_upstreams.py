"""The catalog's upstream MCP servers: what a platform engineer may write, and the pin."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from agentchat.catalog import parse_catalog
from agentchat.catalog_upstreams import definition_pin, pinned_definition
from agentchat.errors import CatalogError
from agentchat.settings import PACKAGE_DATA

ENVS = ["ss-dev", "ss-stage", "prod"]
DEFINITION = {"name": "list_dashboards", "description": "List dashboards.",
              "inputSchema": {"type": "object", "properties": {"page": {"type": "integer"}}}}


def shipped() -> dict[str, Any]:
    raw = yaml.safe_load((PACKAGE_DATA / "catalog.yaml").read_text())
    assert isinstance(raw, dict)
    return raw


def upstream_entry(**over: Any) -> dict[str, Any]:
    entry = {
        "name": "superset__list_dashboards",
        "title": {"ru": "Дашборды Superset", "en": "Superset dashboards"},
        "prompt": {"ru": "Показать дашборды?", "en": "Show the dashboards?"},
        "description": {"ru": "Дашборды из Superset.", "en": "Dashboards from Superset."},
        "keywords": {"ru": ["дашборды"], "en": ["dashboards"]},
        "args": {"type": "object", "additionalProperties": False, "required": ["env"],
                 "properties": {"env": {"type": "string", "enum": ENVS},
                                "page": {"type": "integer", "minimum": 1}}},
        "environment": {"argument": "env"},
        "risk": "read",
        "upstream": {"server": "superset", "tool": "list_dashboards",
                     "pin": definition_pin(DEFINITION)},
    }
    entry.update(over)
    return entry


def catalog_with(entry: dict[str, Any], upstreams: dict[str, Any] | None = None) -> bytes:
    raw = shipped()
    raw["upstreams"] = upstreams if upstreams is not None else {"superset": {
        "url": {"ss-dev": "http://superset-dev:5008/mcp", "prod": "https://superset/mcp"},
        "auth": {"type": "jwt", "audience": "superset-mcp", "issuer": "agentchat"}}}
    raw["tools"].append(entry)
    return yaml.safe_dump(raw, allow_unicode=True).encode()


def test_an_upstream_tool_loads_beside_the_ss_tools_tools() -> None:
    catalog = parse_catalog(catalog_with(upstream_entry()), "catalog.yaml")
    tool = catalog.get("superset__list_dashboards")
    assert tool is not None and tool.upstream is not None
    assert (tool.method, tool.path, tool.upstream.server) == (None, None, "superset")
    assert catalog.upstreams["superset"].url["prod"] == "https://superset/mcp"


@pytest.mark.parametrize(("entry", "upstreams", "message"), [
    (upstream_entry(method="GET", path="/api/x"), None, "either method and path"),
    (upstream_entry(upstream=None), None, "either method and path"),
    (upstream_entry(name="other__list_dashboards"), None, "must start with 'superset__'"),
    (upstream_entry(upstream={"server": "nosuch", "tool": "t", "pin": "sha256:" + "0" * 64},
                    name="nosuch__t"), None, "unknown upstream 'nosuch'"),
    (upstream_entry(environment=None, args={"type": "object", "properties": {}}), None,
     "needs an environment argument"),
    (upstream_entry(upstream={"server": "superset", "tool": "list_dashboards",
                              "pin": "sha256:" + "0" * 64, "definition": DEFINITION}), None,
     "definition does not match pin"),
    (upstream_entry(upstream={"server": "superset", "tool": "list_dashboards",
                              "pin": "md5:abc"}), None, "pin"),
    (upstream_entry(), {"superset": {"url": {"ss-dev": "http://u:p@h/mcp"},
                                     "auth": {"type": "none"}}}, "no credentials"),
    (upstream_entry(), {"superset": {"url": {"ss-dev": "file:///etc/passwd"},
                                     "auth": {"type": "none"}}}, "not an http(s) URL"),
    (upstream_entry(), {"superset": {"url": {"qa": "http://h/mcp"}, "auth": {"type": "none"}}},
     "unknown environments ['qa']"),
    (upstream_entry(), {"superset": {"url": {"prod": "http://h/mcp"},
                                     "auth": {"type": "jwt"}}}, "jwt needs audience and issuer"),
    (upstream_entry(), {"superset": {"url": {"prod": "http://h/mcp"},
                                     "auth": {"type": "client_credentials"}}},
     "needs token_url and client_id"),
])
def test_a_broken_upstream_entry_is_refused_naming_the_tool(
        entry: dict[str, Any], upstreams: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(CatalogError) as e:
        parse_catalog(catalog_with(entry, upstreams), "catalog.yaml")
    assert message in str(e.value)


def test_an_ss_tools_tool_may_not_take_an_upstream_looking_name() -> None:
    raw = shipped()
    raw["tools"][0]["name"] = "superset__show_capabilities"
    with pytest.raises(CatalogError, match="'__' in a name is for upstream tools"):
        parse_catalog(yaml.safe_dump(raw).encode(), "catalog.yaml")


def test_the_pinned_definition_may_be_kept_for_diffs() -> None:
    entry = upstream_entry()
    entry["upstream"]["definition"] = DEFINITION
    tool = parse_catalog(catalog_with(entry), "c.yaml").get("superset__list_dashboards")
    assert tool is not None and tool.upstream is not None
    assert tool.upstream.definition == DEFINITION


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                  max_size=3),
    max_leaves=10)
definitions = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=10)},
    optional={"title": st.text(max_size=10), "description": st.text(max_size=30),
              "inputSchema": st.dictionaries(st.text(max_size=5), json_values, max_size=3),
              "annotations": st.dictionaries(st.text(max_size=5), st.booleans(), max_size=3)})


@given(definitions, st.randoms())
def test_the_pin_is_the_definition_whatever_its_key_order(defn: dict[str, Any],
                                                          rnd: Any) -> None:
    keys = list(defn)
    rnd.shuffle(keys)
    shuffled = json.loads(json.dumps({k: defn[k] for k in keys}))
    assert definition_pin(shuffled) == definition_pin(defn)
    # What the pin ignores: fields outside it, and a field sent as null instead of left out.
    assert definition_pin({**defn, "_meta": {"x": 1}, "icons": [], "outputSchema": None}) == \
        definition_pin(defn)


@given(definitions, st.text(min_size=1, max_size=20))
def test_any_change_to_what_the_model_could_read_changes_the_pin(defn: dict[str, Any],
                                                                 extra: str) -> None:
    changed = copy.deepcopy(defn)
    changed["description"] = defn.get("description", "") + extra
    assert definition_pin(changed) != definition_pin(defn)
    assert set(pinned_definition(changed)) <= {"name", "title", "description", "inputSchema",
                                               "outputSchema", "annotations"}
