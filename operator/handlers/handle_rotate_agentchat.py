"""Keys and token for one AgentChat: publish the JWKS, rotate the ring, renew the token.

Order matters (docs/protocol.md §8): the public JWKS (Secret for pods, ConfigMap for ss-tools) is
written from the planned ring *before* the private ring, and the token is minted last, with a
key that is already published. A failure at any step leaves a JWKS that still holds every
key that can sign or has live tokens; the retry recomputes the plan from the stored ring.
"""

from __future__ import annotations

import json
import time
from typing import Any

import kopf

from agentchat.errors import LocalError
from agentchat.keys import KeyRing, sign_service_token
from agentchat.operator import constants as c
from agentchat.operator.kube import Kube, KubeError, as_body
from agentchat.operator.rotation import Plan, RotationPolicy, next_due, plan_rotation
from agentchat.operator.settings import OperatorSettings
from agentchat.operator.spec import AgentChatSpec, InvalidSpec, Names, parse_spec
from agentchat.operator.status import condition, iso, merge_conditions, parse_iso
from agentchat.operator.tokens import read_claims, renewal_reason

EVENT_REASONS = {"created": "KeyCreated", "published": "KeyPublished",
                 "promoted": "KeyRotated", "retired": "KeyRetired"}


class CorruptRing(LocalError):
    """The signing-key Secret exists but cannot be read: never overwrite it blindly."""


async def handle_rotate_agentchat(*, body: kopf.Body, patch: kopf.Patch, retry: int,
                                  settings: OperatorSettings, kube: Kube) -> None:
    now = time.time()
    status = dict(body.get("status") or {})
    try:
        spec = parse_spec(body.get("spec"), dev=settings.is_dev)
    except InvalidSpec as e:
        _fail(body, patch, status, "InvalidSpec", str(e), now)
        return  # nothing to retry until the spec changes
    try:
        await _reconcile(body, patch, status, spec, settings, kube, now)
    except CorruptRing as e:
        _fail(body, patch, status, "CorruptRing", str(e), now)
        raise kopf.TemporaryError(str(e), delay=settings.backoff(retry)) from None
    except KubeError as e:
        _fail(body, patch, status, "KubernetesApiError", str(e), now)
        raise kopf.TemporaryError(str(e), delay=settings.backoff(retry)) from None


async def _reconcile(body: kopf.Body, patch: kopf.Patch, status: dict[str, Any],
                     spec: AgentChatSpec, settings: OperatorSettings, kube: Kube,
                     now: float) -> None:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    names = Names(name, spec.names)
    owner = dict(body)
    policy = RotationPolicy(
        interval_s=spec.signing_keys.rotation_interval_seconds,
        pre_publication_s=spec.signing_keys.pre_publication_seconds,
        overlap_s=spec.overlap_s(settings.jwt_leeway_s),
    )

    stored = await kube.read_secret(namespace, names.signing_keys)
    ring = _parse_ring(stored, names.signing_keys)
    plan = plan_rotation(ring, policy, now)

    jwks = json.dumps(plan.ring.public_jwks(), indent=2)
    await kube.apply_secret(owner, names.jwks_secret, {c.JWKS_KEY: jwks}, "jwks")
    await kube.apply_config_map(owner, names.jwks_config_map, {c.JWKS_KEY: jwks}, "jwks")
    if plan.changed:
        await kube.apply_secret(owner, names.signing_keys, {c.RING_KEY: plan.ring.to_json()},
                                "signing-keys")
    for action in plan.actions:
        kopf.info(as_body(owner), reason=EVENT_REASONS[action.verb], message=action.describe())

    token_data = await kube.read_secret(namespace, names.service_token)
    token = (token_data or {}).get(c.TOKEN_KEY)
    reason = renewal_reason(token, plan.ring, spec.service_token, now)
    if reason is not None:
        token = sign_service_token(
            plan.ring, issuer=spec.service_token.issuer, audience=spec.service_token.audience,
            subject=spec.service_token.subject, lifetime_s=spec.service_token.lifetime_seconds,
            now=now,
        )
        await kube.apply_secret(owner, names.service_token, {c.TOKEN_KEY: token},
                                "service-token")
    assert token is not None
    header, claims = read_claims(token) or ({}, {})
    refresh_at = claims["exp"] - spec.service_token.refresh_margin_seconds
    if reason is not None:
        kopf.info(as_body(owner), reason="TokenRenewed",
                  message=f"service token re-minted ({reason}); key {header.get('kid')}, "
                          f"expires {iso(claims['exp'])}")

    _write_status(patch, status, plan, policy, now, header, claims, refresh_at)


def _parse_ring(stored: dict[str, str] | None, secret: str) -> KeyRing | None:
    if stored is None:
        return None
    try:
        ring = KeyRing.from_json(stored[c.RING_KEY])
        ring.current()
        return ring
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptRing(f"Secret {secret} holds no readable key ring "
                          f"({type(e).__name__}); fix or delete it") from None


def _write_status(patch: kopf.Patch, status: dict[str, Any], plan: Plan,
                  policy: RotationPolicy, now: float, header: dict[str, Any],
                  claims: dict[str, Any], refresh_at: float) -> None:
    ring = plan.ring
    by_stage = {s: [k.kid for k in ring.by_stage(s)] for s in ("next", "current", "previous")}
    last = iso(now) if plan.changed else (status.get("keys") or {}).get("lastRotationAt")
    patch.status["keys"] = {
        "ring": [{"kid": k.kid, "stage": k.stage, "since": iso(k.stage_since)}
                 for k in ring.keys],
        "current": ring.current().kid,
        "nextTransitionAt": iso(next_due(ring, policy)),
        "lastRotationAt": last,
    }
    patch.status["token"] = {
        "kid": header.get("kid"), "issuedAt": iso(claims["iat"]),
        "expiresAt": iso(claims["exp"]), "refreshAt": iso(refresh_at),
    }
    message = "; ".join(f"{s}: {', '.join(v)}" for s, v in by_stage.items() if v)
    patch.status["conditions"] = merge_conditions(status, [
        condition(c.KEYS_ROTATED, True, "KeysPublished", message, now),
        condition(c.TOKEN_FRESH, True, "TokenValid",
                  f"expires {iso(claims['exp'])}, renewed from {iso(refresh_at)}", now),
    ], now)


def _fail(body: kopf.Body, patch: kopf.Patch, status: dict[str, Any], reason: str,
          message: str, now: float) -> None:
    """Conditions false with the reason; an Event only when the failure is new."""
    prev = {x.get("type"): x for x in status.get("conditions") or []}.get(c.KEYS_ROTATED)
    if not prev or prev.get("reason") != reason or prev.get("message") != message:
        kopf.warn(as_body(body), reason=reason, message=message)
    # The token already minted stays usable until it expires; say so rather than alarm.
    expires = parse_iso((status.get("token") or {}).get("expiresAt"))
    token = (condition(c.TOKEN_FRESH, True, "TokenValid",
                       f"expires {iso(expires)}; renewal blocked: {reason}", now)
             if expires is not None and expires > now
             else condition(c.TOKEN_FRESH, False, reason, message, now))
    patch.status["conditions"] = merge_conditions(status, [
        condition(c.KEYS_ROTATED, False, reason, message, now), token], now)
