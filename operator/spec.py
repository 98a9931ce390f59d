"""The AgentChat spec as typed models, with the CRD's defaults.

The CRD schema (charts/agentchat/crds/) rejects malformed objects at the API server, with the
cross-field rules as CEL (`x-kubernetes-validations`); these models apply the same defaults
and the same rules (tests/operator/test_operator_crd.py evaluates the CEL against them).

Unknown fields are ignored, not refused: Helm never upgrades `crds/`, so after a chart
upgrade or a `helm rollback` the CRD may be one version newer than the operator, and a field
the operator does not know yet must not stop key and token work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from agentchat.errors import ErrorCode, LocalError


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              frozen=True)


class ServiceTokenSpec(_Spec):
    issuer: str = "agentchat"
    audience: str = "ss-tools"
    subject: str = "agentchat-agent"
    # An hour, renewed with 45 minutes left: a token outlives an operator outage of 45 minutes
    # (a crash-looping or unpullable image), where 900/300 gave five.
    lifetime_seconds: int = Field(default=3600, ge=10, le=86400)
    refresh_margin_seconds: int = Field(default=2700, ge=1)


class SigningKeysSpec(_Spec):
    algorithm: Literal["EdDSA"] = "EdDSA"
    rotation_interval_seconds: int = Field(default=7 * 86400, ge=1)
    # kubelet needs up to about two minutes to update a mounted Secret (docs/protocol.md §8) and
    # ss-tools' JWKS client caches for up to ten: the default covers both, plus a minute. The
    # floor (PRE_PUBLICATION_FLOOR_S) is the CRD's minimum, and parse_spec's outside dev mode.
    pre_publication_seconds: int = Field(default=780, ge=0)
    # Unset: the token lifetime plus the verifiers' leeway.
    overlap_seconds: int | None = Field(default=None, ge=1)


class SecretKeyRef(_Spec):
    name: str
    key: str = "url"


class DatabaseSpec(_Spec):
    secret_ref: SecretKeyRef | None = None


class CheckpointSpec(_Spec):
    enabled: bool = True
    keep_latest_after_idle_hours: float = Field(default=24, ge=0)
    delete_inactive_after_days: float = Field(default=90, ge=0)
    delete_archived_after_days: float = Field(default=30, ge=0)
    batch_size: int = Field(default=200, ge=1, le=10000)
    interval_seconds: int = Field(default=3600, ge=1)


_DNS_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class NamesSpec(_Spec):
    signing_keys_secret: str | None = Field(default=None, pattern=_DNS_NAME, max_length=253)
    jwks_secret: str | None = Field(default=None, pattern=_DNS_NAME, max_length=253)
    jwks_config_map: str | None = Field(default=None, pattern=_DNS_NAME, max_length=253)
    service_token_secret: str | None = Field(default=None, pattern=_DNS_NAME, max_length=253)


# The leeway the CRD's overlap rule assumes (AGENTCHAT_JWT_LEEWAY_S's default): the API server
# cannot know the verifiers' setting, and overlap_s() raises the effective overlap to the real
# leeway anyway.
CRD_LEEWAY_S = 30


class AgentChatSpec(_Spec):
    service_token: ServiceTokenSpec = ServiceTokenSpec()
    signing_keys: SigningKeysSpec = SigningKeysSpec()
    database: DatabaseSpec = DatabaseSpec()
    checkpoints: CheckpointSpec = CheckpointSpec()
    names: NamesSpec = NamesSpec()

    @model_validator(mode="after")
    def _cross_field(self) -> AgentChatSpec:
        # The CRD's CEL rules, in the same words (charts/agentchat/crds/).
        token, keys = self.service_token, self.signing_keys
        if token.refresh_margin_seconds >= token.lifetime_seconds:
            raise ValueError("serviceToken.refreshMarginSeconds must be below lifetimeSeconds")
        overlap = keys.overlap_seconds
        if overlap is not None and overlap < token.lifetime_seconds + CRD_LEEWAY_S:
            raise ValueError("signingKeys.overlapSeconds must be at least "
                             f"serviceToken.lifetimeSeconds + {CRD_LEEWAY_S} (a retired key's "
                             "tokens must expire, leeway included)")
        if keys.pre_publication_seconds >= keys.rotation_interval_seconds:
            raise ValueError("signingKeys.prePublicationSeconds must be below "
                             "rotationIntervalSeconds")
        return self

    def overlap_s(self, leeway_s: int) -> int:
        # Verifiers accept a token up to `leeway_s` past its exp, so its key must stay that
        # much longer; an explicit overlap never shortens this.
        floor = self.service_token.lifetime_seconds + leeway_s
        return max(self.signing_keys.overlap_seconds or 0, floor)


class Names:
    """The names of the objects written for one AgentChat (runtime contract defaults)."""

    def __init__(self, name: str, spec: NamesSpec) -> None:
        self.signing_keys = spec.signing_keys_secret or f"{name}-signing-keys"
        self.jwks_secret = spec.jwks_secret or f"{name}-jwks"
        self.jwks_config_map = spec.jwks_config_map or f"{name}-jwks"
        self.service_token = spec.service_token_secret or f"{name}-service-token"


class InvalidSpec(LocalError, ValueError):
    """The spec passed the schema (or there was none) but cannot be acted on."""

    CODE = ErrorCode.INVALID_REQUEST


# A next key must be in every verifier's mounted JWKS before it signs: kubelet takes up to
# about two minutes (its sync period plus the cache TTL) to update a mounted Secret, so a
# shorter pre-publication signs tokens that some verifiers cannot check yet.
PRE_PUBLICATION_FLOOR_S = 120


def parse_spec(raw: Any, *, dev: bool = False, name: str | None = None) -> AgentChatSpec:
    """The typed spec, or InvalidSpec. `dev` (the operator's AGENTCHAT_MODE=dev) lifts the
    pre-publication floor, for the emulator tests that rotate keys in seconds (the CRD's
    minimum applies on a real API server whatever the mode). With `name` (the AgentChat's),
    `spec.names` must start with `NAME-`, like the CRD's rule: the Role grants the operator
    these names only, and no spec may point it at another Secret of the namespace."""
    try:
        spec = AgentChatSpec.model_validate(dict(raw or {}))
    except ValidationError as e:
        parts = ["/".join(str(p) for p in err["loc"]) + ": " + err["msg"] for err in e.errors()]
        raise InvalidSpec("; ".join(parts)) from None
    pre = spec.signing_keys.pre_publication_seconds
    if not dev and pre < PRE_PUBLICATION_FLOOR_S:
        raise InvalidSpec(f"signingKeys/prePublicationSeconds: {pre} is below "
                          f"{PRE_PUBLICATION_FLOOR_S} (kubelet's mounted-Secret propagation); "
                          "shorter only with the operator in AGENTCHAT_MODE=dev")
    if name is not None:
        for field, value in spec.names.model_dump(by_alias=True).items():
            if value is not None and not value.startswith(f"{name}-"):
                raise InvalidSpec(f"names/{field}: {value!r} must start with {name + '-'!r}")
    return spec


def effective_spec(body: Mapping[str, Any], *, dev: bool = False
                   ) -> tuple[AgentChatSpec | None, InvalidSpec | None]:
    """The spec to act on and the current spec's error, if any. An invalid spec falls back
    to `status.lastGoodSpec` (the last spec that parsed), so a bad edit that passed the API
    server (an older CRD, the dev mode's floor) never stops key and token work."""
    name = (body.get("metadata") or {}).get("name")
    try:
        return parse_spec(body.get("spec"), dev=dev, name=name), None
    except InvalidSpec as e:
        error = e
    last = (body.get("status") or {}).get("lastGoodSpec")
    if isinstance(last, Mapping):
        try:
            return parse_spec(last, dev=dev, name=name), error
        except InvalidSpec:
            pass
    return None, error
