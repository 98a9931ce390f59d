"""skaffold.yaml checked against the chart (no skaffold binary or schema is reachable here):
every artifact is a Dockerfile target, every value it sets exists in values.yaml and passes
values.schema.json, the dev profile's values file and port-forwards name real objects, and file
sync lands where the chart's devSync puts the package."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import yaml

from testkit.chart import CHART, ROOT, by_kind, one, render

SKAFFOLD = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _configs() -> list[dict[str, Any]]:
    """The base config and each profile (a profile replaces the sections it names)."""
    base = {k: SKAFFOLD[k] for k in ("build", "deploy", "portForward") if k in SKAFFOLD}
    return [base, *({**base, **p} for p in SKAFFOLD.get("profiles", []))]


def _get(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for key in dotted.split("."):
        assert isinstance(node, dict) and key in node, f"{dotted} is not in values.yaml"
        node = node[key]
    return node


def _template_var(name: str) -> str:
    return re.sub(r"[/-]", "_", name)


def test_api_version_and_shape() -> None:
    major, minor = re.fullmatch(r"skaffold/v(\d+)beta(\d+)", SKAFFOLD["apiVersion"]).groups()
    assert (int(major), int(minor)) >= (4, 13)
    assert SKAFFOLD["kind"] == "Config"
    assert [p["name"] for p in SKAFFOLD["profiles"]] == ["dev"]


def test_artifacts_are_dockerfile_targets() -> None:
    targets = set(re.findall(r"^FROM \S+ AS (\w+)", (ROOT / "Dockerfile").read_text(), re.M))
    for config in _configs():
        for artifact in config["build"]["artifacts"]:
            assert artifact["docker"]["dockerfile"] == "Dockerfile"
            assert artifact["docker"]["target"] in targets
            assert artifact["image"] == f"agentchat-{artifact['docker']['target']}"


def test_set_value_templates_name_real_values_and_built_images() -> None:
    for config in _configs():
        images = {_template_var(a["image"]) for a in config["build"]["artifacts"]}
        [release] = config["deploy"]["helm"]["releases"]
        assert (ROOT / release["chartPath"]) == CHART
        templates = release["setValueTemplates"]
        for key, template in templates.items():
            _get(VALUES, key)
            used = re.findall(r"\{\{\.IMAGE_(?:REPO|TAG|DIGEST)_(\w+)\}\}", template)
            assert used and set(used) <= images, f"{key}: {template}"
        # Every image of the chart's own components is set, repository and tag both.
        for component in ("agent", "sidecar", "operator", "sandbox"):
            assert f"{component}.image.repository" in templates
            assert f"{component}.image.tag" in templates


def _rendered_with_skaffold_values(config: dict[str, Any]) -> list[dict[str, Any]]:
    [release] = config["deploy"]["helm"]["releases"]
    files = [ROOT / f for f in release.get("valuesFiles", [])]
    sets: dict[str, Any] = {}
    for key, _template in release["setValueTemplates"].items():
        # What skaffold would substitute: a repository and a tag of its own.
        sets[key] = ("registry.local/" + key.split(".")[0] if key.endswith("repository")
                     else "abc1234")
    if not files:  # the base config deploys production values: give the two it requires
        sets |= {"database.existingSecret": "db", "identity.user.jwks.existingConfigMap": "j"}
    return render(files, sets, release=release["name"], namespace=release["namespace"])


def test_values_files_and_images_render() -> None:
    for config in _configs():
        [release] = config["deploy"]["helm"]["releases"]
        for path in release.get("valuesFiles", []):
            jsonschema.validate(yaml.safe_load((ROOT / path).read_text()), SCHEMA)
        docs = _rendered_with_skaffold_values(config)
        images = {c["image"] for d in docs if d["kind"] in ("Deployment", "StatefulSet")
                  for c in [*d["spec"]["template"]["spec"].get("initContainers", []),
                            *d["spec"]["template"]["spec"]["containers"]]}
        ours = {i for i in images if i.startswith("registry.local/")}
        assert ours and all(i.endswith(":abc1234") for i in ours)


def test_dev_profile_uses_values_dev_and_forwards_real_services() -> None:
    [dev] = [c for c in _configs() if c["deploy"]["helm"]["releases"][0].get("valuesFiles")]
    [release] = dev["deploy"]["helm"]["releases"]
    assert release["valuesFiles"] == ["charts/agentchat/values-dev.yaml"]
    docs = _rendered_with_skaffold_values(dev)
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    for forward in dev["portForward"]:
        assert forward["resourceType"] == "service"
        assert forward["namespace"] == release["namespace"]
        service = services[forward["resourceName"]]
        assert forward["port"] in {p["port"] for p in service["spec"]["ports"]}


def test_file_sync_lands_in_the_dev_copy_of_the_package() -> None:
    [dev] = SKAFFOLD["profiles"]
    [agent] = [a for a in dev["build"]["artifacts"] if a["image"] == "agentchat-agent"]
    rules = agent["sync"]["manual"]
    docs = render([CHART / "values-dev.yaml"])
    pod = one(docs, "Deployment", "-agent")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "dev-sources")
    assert {"name": "PYTHONPATH", "value": mount} in container["env"]
    assert container["command"][0] == "watchfiles"  # restarts the server on a synced change
    for rule in rules:
        assert rule["src"].endswith("*.py")
        assert rule["dest"].startswith(mount + "/agentchat")
        folder = rule["src"].split("/")[0]
        assert (ROOT / folder / "__init__.py").exists()
        assert rule["strip"] == folder + "/"
