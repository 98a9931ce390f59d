"""The AgentChat CRD: a valid CustomResourceDefinition whose schema accepts good specs and
rejects bad ones (checked with jsonschema, as the API server would), in step with the
operator's own spec model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentchat.operator import constants as c
from agentchat.operator.spec import InvalidSpec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts/agentchat/crds/agentchat.sstools.io_agentchats.yaml"


def crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD.read_text()))


def schema() -> dict[str, Any]:
    """The CRD's schema as the API server applies it with strict field validation (kubectl's
    default since 1.27): an object with `properties` refuses fields it does not list. The CRD
    itself cannot say `additionalProperties: false` next to `properties` (the API server
    refuses such a CRD), so the strictness is added here, where the server would add it."""
    (version,) = crd()["spec"]["versions"]
    return _strict(dict(version["schema"]["openAPIV3Schema"]))


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def test_crd_never_mixes_properties_with_additional_properties() -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert not ("properties" in node and "additionalProperties" in node), node
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(crd())


def resource(spec: Any) -> dict[str, Any]:
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": "chat"},
            "spec": spec}


def test_crd_is_a_valid_custom_resource_definition() -> None:
    kubernetes_validate.validate(crd(), "1.30", strict=True)
    doc = crd()
    assert doc["spec"]["group"] == c.GROUP and doc["spec"]["names"]["plural"] == c.PLURAL
    assert doc["spec"]["scope"] == "Namespaced"
    (version,) = doc["spec"]["versions"]
    assert version["name"] == c.VERSION and version["subresources"] == {"status": {}}
    assert {col["name"] for col in version["additionalPrinterColumns"]} >= {"Ready", "Key"}


GOOD = [
    {},
    {"serviceToken": {"issuer": "agentchat", "audience": "ss-tools", "lifetimeSeconds": 900,
                      "refreshMarginSeconds": 300},
     "signingKeys": {"algorithm": "EdDSA", "rotationIntervalSeconds": 86400,
                     "prePublicationSeconds": 180, "overlapSeconds": 1800},
     "database": {"secretRef": {"name": "db", "key": "url"}},
     "checkpoints": {"enabled": True, "keepLatestAfterIdleHours": 12,
                     "deleteInactiveAfterDays": 60, "deleteArchivedAfterDays": 7,
                     "batchSize": 500, "intervalSeconds": 600},
     "names": {"signingKeysSecret": "chat-keys", "jwksSecret": "chat-jwks2",
               "jwksConfigMap": "chat-jwks2", "serviceTokenSecret": "chat-token"}},
]

BAD = {
    "negative lifetime": {"serviceToken": {"lifetimeSeconds": -5}},
    "lifetime as text": {"serviceToken": {"lifetimeSeconds": "15m"}},
    "unsupported algorithm": {"signingKeys": {"algorithm": "HS256"}},
    "zero interval": {"signingKeys": {"rotationIntervalSeconds": 0}},
    "secretRef without name": {"database": {"secretRef": {"key": "url"}}},
    "batch too large": {"checkpoints": {"batchSize": 1_000_000}},
    "bad secret name": {"names": {"jwksSecret": "Not_A_Name"}},
}


@pytest.mark.parametrize("spec", GOOD)
def test_good_specs_pass_the_schema_and_the_model(spec: dict[str, Any]) -> None:
    jsonschema.validate(resource(spec), schema())
    parse_spec(spec, name="chat")


def test_unknown_fields_are_refused_by_the_schema_and_ignored_by_the_operator() -> None:
    """A newer CRD (Helm never upgrades crds/, a rollback keeps the newer one) may carry
    fields this operator does not know: the API server checks them, the operator reads on."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(resource({"rotate": True}), schema())
    spec = parse_spec({"rotate": True, "serviceToken": {"lifetimeSeconds": 1200,
                                                        "refreshMarginSeconds": 600,
                                                        "audienceV2": ["x"]}})
    assert spec.service_token.lifetime_seconds == 1200


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_specs_are_rejected_by_the_schema(name: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(resource(BAD[name]), schema())
    with pytest.raises(InvalidSpec):
        parse_spec(BAD[name])


def test_cross_field_rules_the_schema_states_as_cel_are_enforced_by_the_model() -> None:
    rules = schema()["properties"]["spec"]["properties"]["serviceToken"]
    assert "refreshMarginSeconds < self.lifetimeSeconds" in rules["x-kubernetes-validations"][
        0]["rule"]
    with pytest.raises(InvalidSpec, match="refreshMarginSeconds"):
        parse_spec({"serviceToken": {"lifetimeSeconds": 60, "refreshMarginSeconds": 60}})
    with pytest.raises(InvalidSpec, match="overlapSeconds"):
        parse_spec({"serviceToken": {"lifetimeSeconds": 900, "refreshMarginSeconds": 300},
                    "signingKeys": {"overlapSeconds": 60}})


def test_missing_spec_is_rejected() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"apiVersion": c.API_VERSION, "kind": c.KIND,
                             "metadata": {"name": "x"}}, schema())
