"""One naming convention for every component's variables (agentchat/settings.py): shared
settings are AGENTCHAT_<NAME>, a component's AGENTCHAT_<COMPONENT>_<NAME>, its tuning
AGENTCHAT_<COMPONENT>_TUNING__<NAME>; the agent keeps at most 40 public settings; the knobs the
agent and the sidecar both read are declared once; an unknown AGENTCHAT_* variable (an old
name included) is reported at start with its closest match; the chart and the tools use the
current names."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest
from pydantic_settings import BaseSettings

from agentchat.agent.settings import AgentSettings, AgentTuning, SelectionSettings
from agentchat.operator.settings import OperatorSettings
from agentchat.policy.settings import PolicySettings, PolicyTuning
from agentchat.sandbox.settings import SandboxSettings
from agentchat.settings import (
    ENV_PREFIX,
    TUNING,
    ServerTuning,
    SharedSettings,
    component_of,
    env_names,
    report_unknown_env,
)
from testkit.chart import CHART, matrix, render
from testkit.support import ROOT

COMPONENT_CLASSES: dict[str, type[BaseSettings]] = {
    "agent": AgentSettings, "policy": PolicySettings, "operator": OperatorSettings,
    "sandbox": SandboxSettings,
}
# What a platform team sets on the agent (agent/README_settings.md); the rest is its tuning.
AGENT_PUBLIC_MAX = 40


def public(cls: type[BaseSettings], component: str) -> list[str]:
    return [f for f in env_names(cls) if "." not in f and component_of(cls, f) == component]


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
        elif field.startswith(TUNING + "."):
            inner = field.split(".", 1)[1].upper()
            assert name == f"{ENV_PREFIX}{component.upper()}_TUNING__{inner}", (field, name)
        else:
            assert name.startswith(f"{ENV_PREFIX}{component.upper()}_"), (field, name)
            assert "TUNING" not in name, (field, name)
    assert len(set(env_names(cls).values())) == len(env_names(cls))


def test_the_agent_has_at_most_40_public_settings() -> None:
    names = public(AgentSettings, "agent")
    assert len(names) <= AGENT_PUBLIC_MAX, (len(names), names)
    # Tool selection reads the agent's own variables through SelectionSettings alone.
    assert env_names(SelectionSettings)["tuning.embeddings_url"] == (
        "AGENTCHAT_AGENT_TUNING__EMBEDDINGS_URL")


def test_the_knobs_agent_and_sidecar_share_are_declared_once() -> None:
    """Token cache, collector and body limit: ServerTuning's fields, which neither component
    declares again; each reads them under its own tuning, with its own defaults."""
    shared = set(ServerTuning.model_fields)
    assert shared == {"token_cache_s", "token_cache_size", "gc_freeze", "gc_gen0_threshold",
                      "max_body_bytes"}
    for tuning in (AgentTuning, PolicyTuning):
        assert shared <= set(tuning.model_fields)
        for klass in tuning.__mro__[:tuning.__mro__.index(ServerTuning)]:
            assert not shared & set(vars(klass).get("__annotations__", {})), klass
    assert AgentTuning.default_of("gc_gen0_threshold") == 50_000
    assert AgentTuning().max_body_bytes == 1 << 20
    assert PolicyTuning().gc_gen0_threshold == 0 and PolicyTuning().max_body_bytes == 64 << 10
    # Nor is any other setting of the agent's a copy of one of the sidecar's.
    agent = {f.split(".")[-1] for f in env_names(AgentSettings)} - set(SharedSettings.model_fields)
    policy = {f.split(".")[-1].removeprefix("policy_") for f in env_names(PolicySettings)}
    assert agent & policy == shared | {"host", "port"}  # each process's own listen address


def test_new_names_are_read(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AGENTCHAT_AGENT_TUNING__LEASE_S", "7")
    clean_env.setenv("AGENTCHAT_AGENT_POLICY_URL", "http://127.0.0.1:9")
    clean_env.setenv("AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS", "none")
    clean_env.setenv("AGENTCHAT_AGENT_TUNING__TOKEN_CACHE_S", "5")
    clean_env.setenv("AGENTCHAT_POLICY_PORT", "8282")
    clean_env.setenv("AGENTCHAT_POLICY_TUNING__TOKEN_CACHE_S", "6")
    clean_env.setenv("AGENTCHAT_OPERATOR_NAMESPACES", '["a", "b"]')
    clean_env.setenv("AGENTCHAT_OPERATOR_TUNING__TICK_S", "3")
    clean_env.setenv("AGENTCHAT_SANDBOX_PORT", "8801")
    clean_env.setenv("AGENTCHAT_USER_ALGORITHMS", '["ES256"]')
    agent = AgentSettings()
    assert (agent.tuning.lease_s, agent.policy_url, agent.tuning.selection_embeddings) == (
        7.0, "http://127.0.0.1:9", "none")
    assert agent.user_algorithms == ["ES256"]
    # The shared knob: one definition, each component's own variable.
    assert (agent.tuning.token_cache_s, PolicySettings().tuning.token_cache_s) == (5.0, 6.0)
    assert PolicySettings().policy_port == 8282
    operator = OperatorSettings()
    assert (operator.operator_namespaces, operator.tuning.tick_s) == (["a", "b"], 3.0)
    assert SandboxSettings(mode="dev").port == 8801
    # Keywords are the field names, whatever the variable; a tuning given in part keeps the
    # environment's and the defaults for the rest.
    assert AgentSettings(tuning={"run_lost_s": 4}).tuning.run_lost_s == 4.0
    assert AgentSettings(tuning={"run_lost_s": 4}).tuning.lease_s == 7.0
    assert AgentSettings(tuning={"run_lost_s": 4}).tuning.gc_gen0_threshold == 50_000
    assert SandboxSettings(mode="dev", port=5).port == 5


def test_the_sandbox_ignores_unprefixed_host_and_port(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("PORT", "1")
    clean_env.setenv("HOST", "0.0.0.0")
    s = SandboxSettings(mode="dev")
    assert (s.host, s.port) == ("127.0.0.1", 8800)


@pytest.mark.parametrize(("old", "new"), [
    ("AGENTCHAT_LEASE_S", "AGENTCHAT_AGENT_TUNING__LEASE_S"),  # before the convention
    ("AGENTCHAT_AGENT_LEASE_S", "AGENTCHAT_AGENT_TUNING__LEASE_S"),  # before the tuning
    ("AGENTCHAT_LLM_BASE_URL", "AGENTCHAT_AGENT_LLM_BASE_URL"),
    ("AGENTCHAT_SELECTION_MIN_TOOLS", "AGENTCHAT_AGENT_TUNING__SELECTION_MIN_TOOLS"),
    ("AGENTCHAT_AGENT_MAX_STREAMS_PER_USER", "AGENTCHAT_AGENT_TUNING__MAX_STREAMS_PER_USER"),
])
def test_an_old_name_is_unknown_and_points_at_the_new(
        clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        old: str, new: str) -> None:
    before = AgentSettings().model_dump()
    clean_env.setenv(old, "9")
    with caplog.at_level(logging.WARNING, "agentchat.settings"):
        warned = report_unknown_env(AgentSettings)
    assert warned == [f"unknown setting {old} (no setting of this component has that name); "
                      f"did you mean {new}?"]
    assert f"did you mean {new}?" in caplog.text
    assert AgentSettings().model_dump() == before  # and never read


def test_an_old_policy_or_operator_name_points_at_its_tuning() -> None:
    env = {"AGENTCHAT_POLICY_TOKEN_CACHE_S": "1", "AGENTCHAT_OPERATOR_TICK_S": "1"}
    assert report_unknown_env(PolicySettings, env) == [
        "unknown setting AGENTCHAT_POLICY_TOKEN_CACHE_S (no setting of this component has that "
        "name); did you mean AGENTCHAT_POLICY_TUNING__TOKEN_CACHE_S?"]
    assert report_unknown_env(OperatorSettings, env) == [
        "unknown setting AGENTCHAT_OPERATOR_TICK_S (no setting of this component has that "
        "name); did you mean AGENTCHAT_OPERATOR_TUNING__TICK_S?"]


def test_unknown_variable_is_reported_with_its_closest_match(
        caplog: pytest.LogCaptureFixture) -> None:
    env = {"AGENTCHAT_CONFIRM_TTL_S": "300", "AGENTCHAT_AGENT_TUNING__LEASE": "3",
           "AGENTCHAT_POLICY_PROT": "1", "AGENTCHAT_ZZZ": "1",
           # Known: shared, own, own tuning, other components' namespaces, not ours.
           "AGENTCHAT_MODE": "dev", "AGENTCHAT_AGENT_TUNING__LEASE_S": "2",
           "AGENTCHAT_AGENT_LLM": "offline", "AGENTCHAT_OPERATOR_TUNING__TICK_S": "1",
           "AGENTCHAT_SANDBOX_PORT": "1", "PATH": "/bin"}
    with caplog.at_level(logging.WARNING, "agentchat.settings"):
        agent = report_unknown_env(AgentSettings, env)
    assert agent == [
        "unknown setting AGENTCHAT_AGENT_TUNING__LEASE (no setting of this component has that "
        "name); did you mean AGENTCHAT_AGENT_TUNING__LEASE_S?",
        "unknown setting AGENTCHAT_CONFIRM_TTL_S (no setting of this component has that name)"
        "; did you mean AGENTCHAT_AGENT_CONFIRMATION_TTL_S?",
        "unknown setting AGENTCHAT_ZZZ (no setting of this component has that name)",
    ]
    assert "did you mean AGENTCHAT_AGENT_CONFIRMATION_TTL_S?" in caplog.text
    # The sidecar reports its own namespace's typo, and leaves the agent's names alone.
    policy = report_unknown_env(PolicySettings, env)
    assert any("AGENTCHAT_POLICY_PROT" in m and "AGENTCHAT_POLICY_PORT?" in m for m in policy)
    assert not any("AGENTCHAT_AGENT_" in m.split(";")[0] for m in policy)


# Each command with one setting it refuses: it must warn before it stops (it never serves),
# and name the refused variable.
ENTRY_POINTS = {
    "serve": (["serve"], {"AGENTCHAT_MODE": "production",
                          "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": "dev-client-secret"},
              "placeholder service client secret"),
    "policy": (["policy", "serve"], {"AGENTCHAT_POLICY_TUNING__TOKEN_CACHE_S": "9999"},
               "AGENTCHAT_POLICY_TUNING__TOKEN_CACHE_S: Input should be less than or equal"),
    "operator": (["operator"], {"AGENTCHAT_OPERATOR_TUNING__TICK_S": "-1"},
                 "AGENTCHAT_OPERATOR_TUNING__TICK_S: Input should be greater than 0"),
    "sandbox": (["sandbox"], {"AGENTCHAT_MODE": "production"},
                "AGENTCHAT_SANDBOX_CLIENT_SECRET must be set"),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_entry_point_reports_unknown_variables(name: str, tmp_path: object) -> None:
    command, refused, reason = ENTRY_POINTS[name]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(ENV_PREFIX)}
    env.update({"AGENTCHAT_MODE": "dev", "AGENTCHAT_DATA_DIR": str(tmp_path),
                "AGENTCHAT_CONFIRM_TTL_S": "300", **refused})
    exe = [sys.executable, "-c", "import sys; from agentchat.cli import main; "
           "sys.exit(main(sys.argv[1:]))", *command]
    done = subprocess.run(exe, env=env, capture_output=True, text=True, timeout=180,
                          cwd=ROOT, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "unknown setting AGENTCHAT_CONFIRM_TTL_S" in done.stderr, done.stderr[-2000:]
    if name == "serve":  # each component knows its own names only: the agent's is this
        assert "did you mean AGENTCHAT_AGENT_CONFIRMATION_TTL_S?" in done.stderr
    assert "refusing to start" in done.stderr and reason in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


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
    assert names <= known, f"not a setting: {names - known}"


def test_the_chart_renders_the_agents_names() -> None:
    names = _rendered_env_names("default")
    assert {"AGENTCHAT_AGENT_POLICY_URL", "AGENTCHAT_AGENT_LLM",
            "AGENTCHAT_AGENT_SERVICE_TOKEN_FILE"} <= names
    dev = _rendered_env_names("dev")
    assert "AGENTCHAT_AGENT_SSTOOLS_URL" in dev


def test_tools_tests_and_docs_name_only_current_settings() -> None:
    """Every AGENTCHAT_<COMPONENT>_* name in the chart, skaffold, the Makefile, the Dockerfile,
    the demo, the tests, bench/ (not its journal), docs/ and the READMEs is a setting of that
    component, or a prefix of some (`AGENTCHAT_AGENT_UPLOAD_*`)."""
    known = set().union(*(env_names(c).values() for c in COMPONENT_CLASSES.values()))
    component = re.compile(r"\bAGENTCHAT_(?:AGENT|POLICY|OPERATOR|SANDBOX)_[A-Z0-9_]*[A-Z0-9]")
    # Deliberately unknown: the typos and old names these tests feed report_unknown_env.
    allowed = {"AGENTCHAT_AGENT_TUNING__LEASE", "AGENTCHAT_POLICY_PROT",
               "AGENTCHAT_AGENT_LEASE_S", "AGENTCHAT_AGENT_MAX_STREAMS_PER_USER",
               "AGENTCHAT_POLICY_TOKEN_CACHE_S", "AGENTCHAT_OPERATOR_TICK_S"}
    files = [*CHART.rglob("*"), ROOT / "skaffold.yaml", ROOT / "Makefile", ROOT / "Dockerfile",
             *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*"),
             *(ROOT / "docs").rglob("*.md"), *ROOT.glob("*.md"), *ROOT.glob("*/README*.md"),
             *ROOT.glob("*/*/README*.md"), *(ROOT / "agentchat").rglob("*.py"),
             *(ROOT / "agent").rglob("*.py"), *(ROOT / "policy").rglob("*.py"),
             *(ROOT / "operator").rglob("*.py"), *(ROOT / "web" / "tests").rglob("*.py")]
    found = {}
    for path in files:
        if (not path.is_file() or path.name == "HISTORY.md" or path.suffix not in (
                ".py", ".md", ".yaml", ".yml", ".json", ".tpl", ".txt", ".mjs", "")
                or {"node_modules", "__pycache__", ".venv"} & set(path.parts)):
            continue
        names = set(component.findall(path.read_text(errors="replace")))
        bad = {n for n in names - known - allowed
               if not any(k.startswith(n + "_") for k in known)}
        if bad:
            found[str(path.relative_to(ROOT))] = sorted(bad)
    assert not found, found
