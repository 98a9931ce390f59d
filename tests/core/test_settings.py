"""One naming convention for every component's variables (agentchat/settings.py): shared
settings are AGENTCHAT_<NAME>, a component's AGENTCHAT_<COMPONENT>_<NAME>; the agent's old
names still work with a warning naming the new one; an unknown AGENTCHAT_* variable is
reported at start with its closest match; the chart and the tools use the new names."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest
from pydantic_settings import BaseSettings

from agentchat.agent.settings import AgentSettings, SelectionSettings
from agentchat.operator.settings import OperatorSettings
from agentchat.policy.settings import PolicySettings
from agentchat.sandbox.settings import SandboxSettings
from agentchat.settings import (
    ENV_PREFIX,
    RENAMED_ENV,
    SharedSettings,
    component_of,
    env_names,
    renamed,
    report_unknown_env,
)
from testkit.chart import CHART, matrix, render
from testkit.support import ROOT

COMPONENT_CLASSES: dict[str, type[BaseSettings]] = {
    "agent": AgentSettings, "policy": PolicySettings, "operator": OperatorSettings,
    "sandbox": SandboxSettings,
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX) or name.upper() in ("HOST", "PORT"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("component", sorted(COMPONENT_CLASSES))
def test_every_variable_follows_the_convention(component: str) -> None:
    cls = COMPONENT_CLASSES[component]
    shared = set(SharedSettings.model_fields)
    for field, name in env_names(cls).items():
        if field == "database_url":
            assert name == "DATABASE_URL"
        elif field in shared:
            assert component_of(cls, field) is None
            assert name == ENV_PREFIX + field.upper()
        else:
            assert name.startswith(f"{ENV_PREFIX}{component.upper()}_"), (field, name)
    assert len(set(env_names(cls).values())) == len(cls.model_fields)


def test_the_old_names_are_exactly_the_agents_former_ones() -> None:
    own = {f: n for f, n in env_names(AgentSettings).items()
           if component_of(AgentSettings, f) == "agent"}
    # Frozen history: every old name is a setting's new name without AGENT_; settings added
    # after the convention (the runs' ones) never had an old name.
    former = {ENV_PREFIX + f.upper(): n for f, n in own.items()}
    assert RENAMED_ENV.items() <= former.items()
    assert "AGENTCHAT_LEASE_S" in RENAMED_ENV and "AGENTCHAT_RUN_EVENTS" not in RENAMED_ENV
    # Selection settings belong to the agent, also read through SelectionSettings alone.
    assert env_names(SelectionSettings)["embeddings_url"] == "AGENTCHAT_AGENT_EMBEDDINGS_URL"


def test_new_names_are_read(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AGENTCHAT_AGENT_LEASE_S", "7")
    clean_env.setenv("AGENTCHAT_AGENT_POLICY_URL", "http://127.0.0.1:9")
    clean_env.setenv("AGENTCHAT_AGENT_SELECTION_EMBEDDINGS", "none")
    clean_env.setenv("AGENTCHAT_POLICY_PORT", "8282")
    clean_env.setenv("AGENTCHAT_OPERATOR_NAMESPACES", '["a", "b"]')
    clean_env.setenv("AGENTCHAT_SANDBOX_PORT", "8801")
    clean_env.setenv("AGENTCHAT_USER_ALGORITHMS", '["ES256"]')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warning for the new names
        agent = AgentSettings()
    assert (agent.lease_s, agent.policy_url, agent.selection_embeddings) == (
        7.0, "http://127.0.0.1:9", "none")
    assert agent.user_algorithms == ["ES256"]
    assert PolicySettings().policy_port == 8282
    assert OperatorSettings().operator_namespaces == ["a", "b"]
    assert SandboxSettings(mode="dev").port == 8801
    # Keywords are the field names, whatever the variable.
    assert AgentSettings(lease_s=3).lease_s == 3.0
    assert SandboxSettings(mode="dev", port=5).port == 5


def test_the_sandbox_ignores_unprefixed_host_and_port(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("PORT", "1")
    clean_env.setenv("HOST", "0.0.0.0")
    s = SandboxSettings(mode="dev")
    assert (s.host, s.port) == ("127.0.0.1", 8800)


def test_an_old_agent_name_works_with_a_warning_naming_the_new(
        clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clean_env.setenv("AGENTCHAT_LEASE_S", "9")
    clean_env.setenv("AGENTCHAT_SELECTION_MIN_TOOLS", "2")
    with caplog.at_level(logging.WARNING, "agentchat.settings"), \
            pytest.warns(DeprecationWarning) as record:
        s = AgentSettings()
    assert (s.lease_s, s.selection_min_tools) == (9.0, 2)
    messages = {str(w.message) for w in record}
    assert "AGENTCHAT_LEASE_S is deprecated; use AGENTCHAT_AGENT_LEASE_S" in messages
    assert ("AGENTCHAT_SELECTION_MIN_TOOLS is deprecated; use "
            "AGENTCHAT_AGENT_SELECTION_MIN_TOOLS") in messages
    assert "use AGENTCHAT_AGENT_LEASE_S" in caplog.text  # logged as well


def test_the_new_name_wins_and_the_old_is_reported_ignored(
        clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AGENTCHAT_LEASE_S", "9")
    clean_env.setenv("AGENTCHAT_AGENT_LEASE_S", "4")
    with pytest.warns(DeprecationWarning, match="AGENTCHAT_LEASE_S is ignored: "
                                                "AGENTCHAT_AGENT_LEASE_S is set"):
        assert AgentSettings().lease_s == 4.0


def test_an_old_name_still_refuses_what_it_refused(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AGENTCHAT_SERVICE_CLIENT_SECRET", "dev-client-secret")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="refused outside dev"):
        AgentSettings()


def test_renamed_maps_old_names_and_keeps_the_new() -> None:
    env = {"AGENTCHAT_LEASE_S": "1", "AGENTCHAT_MODE": "dev", "AGENTCHAT_LLM": "x",
           "AGENTCHAT_AGENT_LLM": "y", "AGENTCHAT_POLICY_DIR": "/p"}
    assert renamed(env) == {"AGENTCHAT_AGENT_LEASE_S": "1", "AGENTCHAT_MODE": "dev",
                            "AGENTCHAT_AGENT_LLM": "y", "AGENTCHAT_POLICY_DIR": "/p"}


def test_unknown_variable_is_reported_with_its_closest_match(
        caplog: pytest.LogCaptureFixture) -> None:
    env = {"AGENTCHAT_CONFIRM_TTL_S": "300", "AGENTCHAT_AGENT_LEASE": "3",
           "AGENTCHAT_POLICY_PROT": "1", "AGENTCHAT_ZZZ": "1",
           # Known: shared, own, old agent names, other components' namespaces, not ours.
           "AGENTCHAT_MODE": "dev", "AGENTCHAT_LEASE_S": "2", "AGENTCHAT_AGENT_LLM": "offline",
           "AGENTCHAT_OPERATOR_TICK_S": "1", "AGENTCHAT_SANDBOX_PORT": "1", "PATH": "/bin"}
    with caplog.at_level(logging.WARNING, "agentchat.settings"):
        agent = report_unknown_env(AgentSettings, env)
    assert agent == [
        "unknown setting AGENTCHAT_AGENT_LEASE (no setting of this component has that name); "
        "did you mean AGENTCHAT_AGENT_LEASE_S?",
        "unknown setting AGENTCHAT_CONFIRM_TTL_S (no setting of this component has that name)"
        "; did you mean AGENTCHAT_AGENT_CONFIRMATION_TTL_S?",
        "unknown setting AGENTCHAT_ZZZ (no setting of this component has that name)",
    ]
    assert "did you mean AGENTCHAT_AGENT_CONFIRMATION_TTL_S?" in caplog.text
    # The sidecar reports its own namespace's typo, and leaves the agent's names alone.
    policy = report_unknown_env(PolicySettings, env)
    assert any("AGENTCHAT_POLICY_PROT" in m and "AGENTCHAT_POLICY_PORT?" in m for m in policy)
    assert not any("AGENTCHAT_AGENT_" in m.split(";")[0] or "AGENTCHAT_LEASE_S" in m
                   for m in policy)


# Each command with one setting it refuses: it must warn before it stops (it never serves).
ENTRY_POINTS = {
    "serve": (["serve"], {"AGENTCHAT_MODE": "production",
                          "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": "dev-client-secret"}),
    "policy": (["policy", "serve"], {"AGENTCHAT_POLICY_TOKEN_CACHE_S": "9999"}),
    "operator": (["operator"], {"AGENTCHAT_OPERATOR_TICK_S": "-1"}),
    "sandbox": (["sandbox"], {"AGENTCHAT_MODE": "production"}),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_entry_point_reports_unknown_variables(name: str, tmp_path: object) -> None:
    command, refused = ENTRY_POINTS[name]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(ENV_PREFIX)}
    env.update({"AGENTCHAT_MODE": "dev", "AGENTCHAT_DATA_DIR": str(tmp_path),
                "AGENTCHAT_CONFIRM_TTL_S": "300", **refused})
    exe = [sys.executable, "-c", "import sys; from agentchat.cli import main; "
           "sys.exit(main(sys.argv[1:]))", *command]
    done = subprocess.run(exe, env=env, capture_output=True, text=True, timeout=180,
                          cwd=ROOT, check=False)
    assert done.returncode != 0
    assert "unknown setting AGENTCHAT_CONFIRM_TTL_S" in done.stderr, done.stderr[-2000:]
    assert "did you mean AGENTCHAT_AGENT_CONFIRMATION_TTL_S?" in done.stderr


def _rendered_env_names(case: str) -> set[str]:
    names: set[str] = set()
    for doc in render(matrix()[case]):
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-env"):
            names |= set(doc.get("data", {}))
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            names |= {e["name"] for e in c.get("env", [])}
    return {n for n in names if n.startswith(ENV_PREFIX) or n == "DATABASE_URL"}


@pytest.mark.parametrize("case", sorted(matrix()))
def test_the_chart_renders_only_current_names(case: str) -> None:
    known = set().union(*(env_names(c).values() for c in COMPONENT_CLASSES.values()))
    names = _rendered_env_names(case)
    assert names, "the chart sets no AGENTCHAT_* variable?"
    assert not names & set(RENAMED_ENV), f"old names rendered: {names & set(RENAMED_ENV)}"
    assert names <= known, f"not a setting: {names - known}"


def test_the_chart_renders_the_agents_new_names() -> None:
    names = _rendered_env_names("default")
    assert {"AGENTCHAT_AGENT_POLICY_URL", "AGENTCHAT_AGENT_LLM",
            "AGENTCHAT_AGENT_SERVICE_TOKEN_FILE"} <= names
    dev = _rendered_env_names("dev")
    assert "AGENTCHAT_AGENT_SSTOOLS_URL" in dev


def test_tools_and_chart_text_use_no_old_name() -> None:
    """The chart, skaffold, the demo, the test stack, bench/ and docs/ name no old variable."""
    import re

    old = re.compile(r"\b(" + "|".join(sorted(RENAMED_ENV, key=len, reverse=True)) + r")\b")
    files = [*CHART.rglob("*"), ROOT / "skaffold.yaml", ROOT / "agentchat" / "demo.py",
             ROOT / "tests" / "testkit" / "stack.py", *(ROOT / "bench").rglob("*"),
             *(ROOT / "docs").rglob("*.md")]
    found = {}
    for path in files:
        if path.is_file() and path.suffix in (".py", ".md", ".yaml", ".yml", ".json", ".tpl",
                                              ".txt", ".mjs"):
            hits = old.findall(path.read_text())
            if hits:
                found[str(path.relative_to(ROOT))] = sorted(set(hits))
    assert not found, found
