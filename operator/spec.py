"""The AgentChat spec as typed models, with the CRD's defaults.

The CRD schema (charts/agentchat/crds/) rejects malformed objects at the API server; these
models apply the same defaults and add the checks a schema cannot express across fields
(the overlap must cover a token's lifetime, the refresh margin must be under the lifetime).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from agentchat.errors import ErrorCode, LocalError


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)


class ServiceTokenSpec(_Spec):
    issuer: str = "agentchat"
    audience: str = "ss-tools"
    subject: str = "agentchat-agent"
    lifetime_seconds: int = Field(default=900, ge=10, le=86400)
    refresh_margin_seconds: int = Field(default=300, ge=1)


class SigningKeysSpec(_Spec):
    algorithm: Literal["EdDSA"] = "EdDSA"
    rotation_interval_seconds: int = Field(default=7 * 86400, ge=1)
    # kubelet needs up to about two minutes to update a mounted Secret (docs/protocol.md §8); the
    # floor (PRE_PUBLICATION_FLOOR_S) is enforced by parse_spec outside dev mode.
    pre_publication_seconds: int = Field(default=180, ge=0)
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


class AgentChatSpec(_Spec):
    service_token: ServiceTokenSpec = ServiceTokenSpec()
    signing_keys: SigningKeysSpec = SigningKeysSpec()
    database: DatabaseSpec = DatabaseSpec()
    checkpoints: CheckpointSpec = CheckpointSpec()
    names: NamesSpec = NamesSpec()

    @model_validator(mode="after")
    def _cross_field(self) -> AgentChatSpec:
        token = self.service_token
        if token.refresh_margin_seconds >= token.lifetime_seconds:
            raise ValueError("serviceToken.refreshMarginSeconds must be below lifetimeSeconds")
        overlap = self.signing_keys.overlap_seconds
        if overlap is not None and overlap < token.lifetime_seconds:
            raise ValueError("signingKeys.overlapSeconds must be at least "
                             "serviceToken.lifetimeSeconds (a retired key's tokens must expire)")
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


def parse_spec(raw: Any, *, dev: bool = False) -> AgentChatSpec:
    """The typed spec, or InvalidSpec. `dev` (the operator's AGENTCHAT_MODE=dev) lifts the
    pre-publication floor, for test clusters that rotate keys in seconds. The floor is here
    and not in the CRD, which cannot know the mode (see operator/README.md)."""
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
    return spec
