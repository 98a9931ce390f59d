"""The CRD's cross-field rules (`x-kubernetes-validations`) evaluated with a CEL evaluator
(cel-python) on the CRD as the chart ships it, the way the API server applies them: defaults
first, then each rule with `self` bound to its node. Every case must get the same verdict
from the CEL rules and from the operator's own model (operator/spec.py)."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest

from agentchat.operator import constants as c
from agentchat.operator.spec import InvalidSpec, parse_spec
from testkit.chart import crd


def _schema() -> dict[str, Any]:
    doc = crd()
    assert doc is not None
    (version,) = doc["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: a missing property with a `default`
    gets it (an object default of {} is then defaulted in turn)."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    out = dict(value)
    for name, sub in schema["properties"].items():
        if name not in out and "default" in sub:
            out[name] = copy.deepcopy(sub["default"])
        if name in out:
            out[name] = apply_defaults(sub, out[name])
    return out


def _rules(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                             str, str]]:
    found = [(path, r["rule"], r.get("message", "")) for r in
             schema.get("x-kubernetes-validations") or []]
    for name, sub in (schema.get("properties") or {}).items():
        found += _rules(sub, (*path, name))
    return found


def cel_errors(obj: dict[str, Any]) -> list[str]:
    """The messages of the CEL rules the (defaulted) object breaks."""
    schema = _schema()
    obj = apply_defaults(schema, obj)
    env = celpy.Environment()
    errors = []
    for path, rule, message in _rules(schema):
        node: Any = obj
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            continue  # a rule applies only where its node exists
        program = env.program(env.compile(rule))
        if not bool(program.evaluate({"self": celpy.json_to_cel(node)})):
            errors.append(message)
    return errors


def resource(spec: dict[str, Any], name: str = "chat") -> dict[str, Any]:
    return {"apiVersion": c.API_VERSION, "kind": c.KIND,
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def test_the_crd_has_the_cross_field_rules() -> None:
    messages = " ".join(m for _, _, m in _rules(_schema()))
    for words in ("refreshMarginSeconds must be below lifetimeSeconds",
                  "overlapSeconds must be at least", "prePublicationSeconds must be below",
                  "spec.names must start with"):
        assert words in messages


CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "defaults": ({}, None),
    "the chart's values": ({"serviceToken": {"lifetimeSeconds": 3600,
                                             "refreshMarginSeconds": 2700},
                            "signingKeys": {"prePublicationSeconds": 780}}, None),
    "margin equal to lifetime": ({"serviceToken": {"lifetimeSeconds": 600,
                                                   "refreshMarginSeconds": 600}},
                                 "refreshMarginSeconds"),
    "margin over the default lifetime": ({"serviceToken": {"refreshMarginSeconds": 4000}},
                                         "refreshMarginSeconds"),
    "overlap below lifetime": ({"signingKeys": {"overlapSeconds": 1800}}, "overlapSeconds"),
    "overlap without the leeway": ({"serviceToken": {"lifetimeSeconds": 900,
                                                     "refreshMarginSeconds": 300},
                                    "signingKeys": {"overlapSeconds": 900}},
                                   "overlapSeconds"),
    "overlap with the leeway": ({"serviceToken": {"lifetimeSeconds": 900,
                                                  "refreshMarginSeconds": 300},
                                 "signingKeys": {"overlapSeconds": 930}}, None),
    "overlap against the default lifetime": ({"signingKeys": {"overlapSeconds": 3630}}, None),
    "pre-publication as long as the interval": (
        {"signingKeys": {"rotationIntervalSeconds": 600, "prePublicationSeconds": 600}},
        "prePublicationSeconds"),
    "pre-publication over the default interval": (
        {"signingKeys": {"prePublicationSeconds": 700000}}, "prePublicationSeconds"),
    "names of this AgentChat": ({"names": {"jwksSecret": "chat-public",
                                           "serviceTokenSecret": "chat-tok"}}, None),
    "a name outside it": ({"names": {"jwksSecret": "chat-public",
                                     "signingKeysSecret": "database-credentials"}},
                          "names"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cel_rules_and_the_operator_agree(case: str) -> None:
    spec, broken = CASES[case]
    errors = cel_errors(resource(spec))
    if broken is None:
        assert errors == []
        parse_spec(spec, name="chat")
    else:
        assert errors and all(broken in e for e in errors), errors
        with pytest.raises(InvalidSpec, match=broken):
            parse_spec(spec, name="chat")


def test_the_pre_publication_floor_is_the_crd_minimum() -> None:
    node = _schema()["properties"]["spec"]["properties"]["signingKeys"]["properties"]
    assert node["prePublicationSeconds"]["minimum"] == 120
    assert node["prePublicationSeconds"]["default"] >= 120 + 600  # kubelet + a 10-min cache
