"""Policy tests mounted without rolling the pods (issue 23, item 8): the tests are a ConfigMap of
their own, mounted whole at AGENTCHAT_POLICY_TESTS_DIR, so adding a test file changes that
ConfigMap and leaves the Deployment's pod template byte for byte as it was. All with the real
helm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.chart import CHART, HelmError, matrix, one, render, run_helm
from testkit.chart import _args as values_args

DEFAULT = matrix()["default"]
TESTS_DIR = "/etc/agentchat/policy-tests"
ONE = {"policy.tests.prod-deploys\\.yaml":
       "cases:\n  - roles: [editor]\n    env: prod\n    tool: deploy_dashboard\n"
       "    expect: allow_with_confirmation\n"}
TWO = {**ONE, "policy.tests.readers\\.yaml":
       "cases:\n  - roles: [viewer]\n    env: ss-dev\n    tool: list_databases\n"
       "    expect: allow\n"}


def _deployment_text(files: list[Path], sets: dict[str, Any]) -> str:
    """The agent Deployment exactly as helm renders it (text, not parsed)."""
    return run_helm("template", "t", str(CHART), "--namespace", "agentchat",
                    "--show-only", "templates/agent/deployment.yaml",
                    *values_args(files, sets))


def _pod_template_text(deployment: str) -> str:
    """The `template:` block of the Deployment's spec, byte for byte."""
    lines = deployment.splitlines(keepends=True)
    start = lines.index("  template:\n")
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and not lines[i].startswith("    ")), len(lines))
    return "".join(lines[start:end])


def test_a_new_policy_test_file_leaves_the_pod_template_byte_identical() -> None:
    one_text, two_text = _deployment_text(DEFAULT, ONE), _deployment_text(DEFAULT, TWO)
    one_template = _pod_template_text(one_text)
    assert "policy-tests" in one_template and len(one_template) > 1000
    assert one_template == _pod_template_text(two_text)
    assert one_text == two_text  # nothing else in the Deployment moves either
    # Only the tests ConfigMap changes, by the one new key.
    docs = {n: render(DEFAULT, s) for n, s in (("one", ONE), ("two", TWO))}
    tests = {n: one(d, "ConfigMap", "-policy-tests")["data"] for n, d in docs.items()}
    assert set(tests["two"]) - set(tests["one"]) == {"readers.yaml"}
    assert set(tests["one"]) == {"roles.yaml", "scoped.yaml", "prod-deploys.yaml"}
    for kind, suffix in (("ConfigMap", "-policy"), ("ConfigMap", "-env")):
        assert one(docs["one"], kind, suffix) == one(docs["two"], kind, suffix)


def _sidecar(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    return dict(next(c for c in [*pod.get("initContainers", []), *pod["containers"]]
                     if c["name"] == "policy"))


def _volumes(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    return {v["name"]: v for v in pod["volumes"]}


def test_the_tests_configmap_is_mounted_whole_where_the_sidecar_reads_it() -> None:
    docs = render(DEFAULT, ONE)
    env = one(docs, "ConfigMap", "-env")["data"]
    assert env["AGENTCHAT_POLICY_TESTS_DIR"] == TESTS_DIR
    mounts = {m["mountPath"]: m for m in _sidecar(docs)["volumeMounts"]}
    assert mounts[TESTS_DIR] == {"name": "policy-tests", "mountPath": TESTS_DIR,
                                 "readOnly": True}
    volumes = _volumes(docs)
    assert volumes["policy-tests"] == {"name": "policy-tests",
                                       "configMap": {"name": "t-agentchat-policy-tests"}}
    assert volumes["policy"] == {"name": "policy", "configMap": {"name": "t-agentchat-policy"}}
    assert set(one(docs, "ConfigMap", "-policy")["data"]) == {"model.conf", "policy.csv",
                                                               "approvals.yaml"}
    # The tests are YAML the sidecar parses as shipped.
    for text in one(docs, "ConfigMap", "-policy-tests")["data"].values():
        assert yaml.safe_load(text)["cases"]


def test_an_existing_tests_configmap_is_mounted_the_same_way() -> None:
    docs = render(DEFAULT, {"policy.existingConfigMap": "team-policy",
                            "policy.existingTestsConfigMap": "team-policy-tests"})
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"
            and "policy" in d["metadata"]["name"]] == []
    assert _volumes(docs)["policy-tests"]["configMap"] == {"name": "team-policy-tests"}
    assert _volumes(docs)["policy"]["configMap"] == {"name": "team-policy"}
    assert one(docs, "ConfigMap", "-env")["data"]["AGENTCHAT_POLICY_TESTS_DIR"] == TESTS_DIR
    # Only with the chart's own policy: its tests ConfigMap, from the existing one's name.
    own = render(DEFAULT, {"policy.existingTestsConfigMap": "team-policy-tests"})
    assert [d["metadata"]["name"] for d in own if d["kind"] == "ConfigMap"
            and "policy" in d["metadata"]["name"]] == ["t-agentchat-policy"]


def test_an_existing_policy_with_items_keeps_its_tests_folder() -> None:
    """Before the tests ConfigMap: tests kept in policy.existingConfigMap, mapped by items to
    tests/ (a new test file changes the items, so the pods roll; documented)."""
    items = [{"key": "model.conf", "path": "model.conf"},
             {"key": "policy.csv", "path": "policy.csv"},
             {"key": "tests_roles.yaml", "path": "tests/roles.yaml"}]
    docs = render(DEFAULT, {"policy.existingConfigMap": "team-policy",
                            "policy.existingConfigMapItems": items})
    assert "AGENTCHAT_POLICY_TESTS_DIR" not in one(docs, "ConfigMap", "-env")["data"]
    assert "policy-tests" not in _volumes(docs)
    assert TESTS_DIR not in {m["mountPath"] for m in _sidecar(docs)["volumeMounts"]}
    assert _volumes(docs)["policy"]["configMap"] == {"name": "team-policy", "items": items}


@pytest.mark.parametrize(("sets", "message"), [
    ({**ONE, "policy.existingTestsConfigMap": "team-policy-tests"},
     "either policy.existingTestsConfigMap or the inline policy.tests"),
    ({"policy.existingConfigMap": "team-policy", "policy.existingTestsConfigMap": "x",
      "policy.existingConfigMapItems": [{"key": "tests_a.yaml", "path": "tests/a.yaml"}]},
     "the tests come from policy.existingTestsConfigMap"),
    # The sidecar reads *.yaml only: a .yml test would never run.
    ({"policy.tests.smoke\\.yml": "cases: []\n"}, "'smoke.yml' does not match pattern"),
])
def test_ambiguous_policy_tests_are_refused(sets: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError, match=message.replace(".", r"\.")):
        render(DEFAULT, sets)
