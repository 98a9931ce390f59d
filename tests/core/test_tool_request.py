"""The one request builder (agentchat.tool_request) and the catalog rules it relies on.

Property-based: generated argument sets (hostile strings included) for every catalog tool;
each either is refused or yields a URL path that matches the tool's template with every path
parameter exactly one percent-encoded segment holding the validated value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentchat.catalog import Tool, load_catalog
from agentchat.errors import CatalogError
from agentchat.settings import PACKAGE_DATA
from agentchat.tool_request import InvalidArguments, build_request, validate_arguments

CATALOG = load_catalog(PACKAGE_DATA / "catalog.yaml")
EXAMPLES_PER_TOOL = 600  # 18 tools: over 10,000 argument sets in all
HOSTILE = ["../", "..", ".", "%2F", "%2e%2e", "\\", "?", "#", "/", "\x00", "\n", "..%2f",
           "../dashboards/5/deploy#", "../maintenance?", "../audit", "task-1/../../audit",
           "task-ok", "task-", "ss-dev", "prod", "qa", "*", " ", "42", "-1"]


def _value() -> st.SearchStrategy[Any]:
    hostile = st.sampled_from(HOSTILE)
    texts = st.one_of(hostile, st.text(max_size=20),
                      st.builds(lambda a, b: a + b, hostile, st.text(max_size=5)),
                      st.builds(lambda a: "task-" + a, st.text(max_size=12)))
    return st.one_of(texts, st.integers(-3, 10**12), st.booleans(), st.none(),
                     st.floats(allow_nan=False), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _plausible(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the schema accepts most of the time, so valid calls are built too."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if schema.get("type") == "integer":
        return st.integers(schema.get("minimum", -5), schema.get("maximum", 10**12))
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True)
    return st.text(max_size=schema.get("maxLength", 30))


def _arguments(tool: Tool) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = tool.args.get("properties", {})
    names = [*props, "path", "extra", "id"]
    hostile = st.dictionaries(st.sampled_from(names), _value(), max_size=5)
    # Start from a plausible call, then maybe break one argument or add a key.
    plausible = st.fixed_dictionaries({k: _plausible(v) for k, v in props.items()})
    mutated = st.builds(lambda base, key, value, drop: (
        {k: v for k, v in base.items() if k != drop} | ({key: value} if key else {})),
        plausible, st.one_of(st.none(), st.sampled_from(names)), _value(),
        st.one_of(st.none(), st.sampled_from(names)))
    return st.one_of(hostile, plausible, mutated)


def _template(tool: Tool) -> re.Pattern[str]:
    pattern = re.escape(tool.path)
    for name in tool.path_params():
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>[^/?#%\\\\]+|"
                                  f"[A-Za-z0-9_.~-]*(?:%[0-9A-F]{{2}}[A-Za-z0-9_.~-]*)+)")
    return re.compile(f"^{pattern}$")


@pytest.mark.parametrize("tool", CATALOG.tools, ids=lambda t: t.name)
def test_every_built_path_matches_the_template_or_the_call_is_refused(tool: Tool) -> None:
    template = _template(tool)
    counts = {"built": 0, "refused": 0}

    @settings(max_examples=EXAMPLES_PER_TOOL, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(_arguments(tool))
    def check(args: dict[str, Any]) -> None:
        try:
            req = build_request(tool, args)
        except InvalidArguments:
            counts["refused"] += 1
            return
        counts["built"] += 1
        match = template.match(req.path)
        assert match, (req.path, args)
        for name in tool.path_params():
            segment = match.group(name)
            assert "/" not in unquote(segment) and unquote(segment) == str(args[name])
            assert unquote(segment) not in (".", "..")
        sent = {**req.params, **(req.body or {})}
        assert set(sent) <= set(tool.args.get("properties", {}))
        assert req.method == tool.method

    check()
    assert counts["refused"] > 0, "hostile sets must be refused"
    assert counts["built"] > EXAMPLES_PER_TOOL // 10, "and valid ones built"


@pytest.mark.parametrize(("tool", "args"), [
    ("refresh_dataset", {"dataset_id": "../dashboards/5/deploy#", "env_id": "ss-stage"}),
    ("start_maintenance", {"env_id": "prod", "reason": "x", "duration_minutes": "../"}),
    ("get_task_status", {"task_id": "../audit"}),
    ("get_task_status", {"task_id": "task-%2F..%2Faudit"}),
    ("get_task_status", {"task_id": "task-a\\b"}),
    ("get_task_status", {"task_id": "task-1?all=1"}),
    ("get_task_status", {"task_id": "task-1#x"}),
    ("deploy_dashboard", {"dashboard_id": "42", "env_id": "ss-dev"}),   # no coercion
    ("deploy_dashboard", {"dashboard_id": True, "env_id": "ss-dev"}),   # a bool is no int
    ("deploy_dashboard", {"dashboard_id": 42, "env_id": "qa"}),         # not an environment
    ("deploy_dashboard", {"dashboard_id": 42}),                          # no environment
    ("delete_dashboard", {"dashboard_id": 5}),
    ("search_dashboards", {"query": "x", "env_id": "ss-dev", "path": "/api/audit"}),
    ("start_migration", {"dashboard_id": 1, "target_env": "prod"}),     # no source
])
def test_the_reported_smuggles_are_refused(tool: str, args: dict[str, Any]) -> None:
    t = CATALOG.get(tool)
    assert t is not None
    with pytest.raises(InvalidArguments):
        validate_arguments(t, args)
    with pytest.raises(InvalidArguments):
        build_request(t, args)


def test_valid_calls_build_exactly_their_request() -> None:
    deploy = CATALOG.get("deploy_dashboard")
    task = CATALOG.get("get_task_status")
    search = CATALOG.get("search_dashboards")
    assert deploy and task and search
    req = build_request(deploy, {"dashboard_id": 42, "env_id": "prod"})
    assert (req.method, req.path, req.params, req.body) == (
        "POST", "/api/dashboards/42/deploy", {}, {"env_id": "prod"})
    assert build_request(task, {"task_id": "task-9b6c1ecebf6be5c8"}).path == \
        "/api/tasks/task-9b6c1ecebf6be5c8"
    assert build_request(search, {"query": "энергия", "env_id": "ss-dev"}).params == {
        "query": "энергия", "env_id": "ss-dev"}


# --- the catalog refuses tools the builder could not make safe --------------------------------


def _catalog_with(tmp_path: Path, change: dict[str, Any], tool: str = "deploy_dashboard") -> Path:
    data = yaml.safe_load((PACKAGE_DATA / "catalog.yaml").read_text())
    for t in data["tools"]:
        if t["name"] == tool:
            for key, value in change.items():
                if value is None:
                    t.pop(key, None)
                elif key == "args.properties":
                    t["args"]["properties"].update(value)
                else:
                    t[key] = value
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.mark.parametrize(("tool", "change", "message"), [
    ("get_task_status", {"args.properties": {"task_id": {"type": "string"}}},
     "path parameter {task_id} needs a typed schema"),
    ("deploy_dashboard", {"args.properties": {"env_id": {"type": "string"}}},
     "environment argument needs type string and the catalog's environments as its enum"),
    ("deploy_dashboard", {"environment": None}, "a write tool must declare its environment"),
    ("deploy_dashboard", {"args": {"type": "object", "properties": {
        "dashboard_id": {"type": "integer"}, "env_id": {
            "type": "string", "enum": ["ss-dev", "ss-stage", "prod"]}}}},
     "environment argument 'env_id' must be required"),
    # A grant leaves free text out of its object: never an argument that picks what runs.
    *[("start_migration", {"free_text": [arg]}, f"free_text argument {arg!r} must be")
      for arg in ("source_env", "dashboard_id", "nope")],
    ("deploy_dashboard", {"free_text": ["version"]}, "free_text argument 'version' must be"),
])
def test_catalog_refuses_what_the_builder_cannot_make_safe(
        tmp_path: Path, tool: str, change: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError) as err:
        load_catalog(_catalog_with(tmp_path, change, tool))
    assert message in str(err.value) and tool in str(err.value)
