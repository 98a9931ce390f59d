"""Keys and token for one AgentChat: publish the JWKS, rotate the ring, renew the token.

One writer (operator/README.md): every object is read with its resourceVersion (the JWKS first, then
the ring and the token) and written on condition that it is unchanged; the ring is written first, so
of two operators acting at once exactly one stores its plan, and the other meets a Conflict,
re-reads and re-plans from the stored ring. The public JWKS (Secret for pods, ConfigMap for
ss-tools) is written next, and the token is minted last, only once the JWKS holding its key is
published. A next key that a failure left unpublished starts its pre-publication again when it is
published, so no key signs before it has been published for `prePublicationSeconds`
(docs/protocol.md §8).

A spec the operator cannot act on never stops this work: the last spec that was good
(`status.lastGoodSpec`) keeps the keys rotating and the token renewed, and the error is the
`SpecValid` condition and an `InvalidSpec` Event until the spec is fixed.

A missing ring Secret while the JWKS Secret still lists keys is recovered, never swapped:
a next key is published (it signs after the pre-publication delay) and the JWKS keeps the
old public keys for the overlap (`retained.json` in the ring Secret), so tokens in flight
keep verifying (`RingRecreated` Event).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import kopf

from agentchat.errors import LocalError
from agentchat.keys import KeyRing, sign_service_token
from agentchat.operator import constants as c
from agentchat.operator import metrics, resume_keys
from agentchat.operator.kube import Conflict, Kube, KubeError, Seen, as_body
from agentchat.operator.rotation import (
    Plan,
    RotationPolicy,
    next_due,
    plan_recovery,
    plan_rotation,
)
from agentchat.operator.settings import OperatorSettings
from agentchat.operator.spec import AgentChatSpec, InvalidSpec, Names, effective_spec
from agentchat.operator.status import (
    condition,
    current_conditions,
    iso,
    merge_conditions,
    own_conditions,
    parse_iso,
)
from agentchat.operator.tokens import read_claims, renewal_reason

EVENT_REASONS = {"created": "KeyCreated", "published": "KeyPublished",
                 "promoted": "KeyRotated", "retired": "KeyRetired"}
RESUME_EVENT_REASONS = {"created": "ResumeKeyCreated", "published": "ResumeKeyPublished",
                        "promoted": "ResumeKeyRotated", "retired": "ResumeKeyRetired"}
RESUME_EVENT_WORDS = {"created": "created (seals)", "published": "listed last (opens only)",
                      "promoted": "now seals (first line)", "retired": "removed (oldest)"}


# Conflicts (another operator wrote since this one read) re-planned in one pass before kopf's
# own retry takes over.
CONFLICT_ATTEMPTS = 3


class CorruptRing(LocalError):
    """The signing-key Secret exists but cannot be read: never overwrite it blindly."""


async def handle_rotate_agentchat(*, body: kopf.Body, patch: kopf.Patch, retry: int,
                                  settings: OperatorSettings, kube: Kube) -> None:
    now = time.time()
    status = dict(body.get("status") or {})
    spec, error = effective_spec(body, dev=settings.is_dev)
    if spec is None:
        assert error is not None
        _fail(body, patch, status, "InvalidSpec", str(error), now)
        metrics.FAILURES.labels(metrics.resource(body), "keys", "InvalidSpec").inc()
        return  # no spec was ever good: nothing to act on until it is fixed
    spec_valid = _spec_condition(body, status, error, now)
    if error is None and status.get("lastGoodSpec") != dict(body.get("spec") or {}):
        patch.status["lastGoodSpec"] = dict(body.get("spec") or {})
    who = metrics.resource(body)
    try:
        await _reconcile(body, patch, status, spec, settings, kube, now, spec_valid)
    except CorruptRing as e:
        _fail(body, patch, status, "CorruptRing", str(e), now, spec_valid)
        metrics.FAILURES.labels(who, "keys", "CorruptRing").inc()
        raise kopf.TemporaryError(str(e), delay=settings.backoff(retry)) from None
    except KubeError as e:
        _fail(body, patch, status, "KubernetesApiError", str(e), now, spec_valid)
        metrics.FAILURES.labels(who, "keys", "KubernetesApiError").inc()
        raise kopf.TemporaryError(str(e), delay=settings.backoff(retry)) from None
    metrics.LAST_SUCCESS.labels(who, "keys").set(now)


def _spec_condition(body: kopf.Body, status: dict[str, Any], error: InvalidSpec | None,
                    now: float) -> dict[str, Any]:
    """SpecValid, with a Warning Event when the spec's error is new."""
    if error is None:
        return condition(c.SPEC_VALID, True, "SpecAccepted", "the spec is in effect", now)
    message = f"{error}; acting on the last good spec"
    prev = current_conditions(status).get(c.SPEC_VALID) or {}
    if prev.get("status") != "False" or prev.get("message") != message:
        kopf.warn(as_body(body), reason="InvalidSpec", message=message)
    return condition(c.SPEC_VALID, False, "InvalidSpec", message, now)


def _token_alive(token: str | None, now: float) -> bool:
    claims = (read_claims(token) or ({}, {}))[1] if token else {}
    exp = claims.get("exp")
    return isinstance(exp, int) and exp > now


async def _reconcile(body: kopf.Body, patch: kopf.Patch, status: dict[str, Any],
                     spec: AgentChatSpec, settings: OperatorSettings, kube: Kube,
                     now: float, spec_valid: dict[str, Any]) -> None:
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            await _pass(body, patch, status, spec, settings, kube, time.time() if attempt > 1
                        else now, spec_valid)
            return
        except Conflict:
            if attempt == CONFLICT_ATTEMPTS:
                raise
            metrics.FAILURES.labels(metrics.resource(body), "keys", "Conflict").inc()


async def _pass(body: kopf.Body, patch: kopf.Patch, status: dict[str, Any],
                spec: AgentChatSpec, settings: OperatorSettings, kube: Kube,
                now: float, spec_valid: dict[str, Any]) -> None:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    names = Names(name, spec.names)
    owner = dict(body)
    policy = RotationPolicy(
        interval_s=spec.signing_keys.rotation_interval_seconds,
        pre_publication_s=spec.signing_keys.pre_publication_seconds,
        overlap_s=spec.overlap_s(settings.jwt_leeway_s),
    )

    # The JWKS first: what it lists is at least what the ring read after it had published.
    jwks_seen = await kube.read("Secret", namespace, names.jwks_secret)
    cm_seen = await kube.read("ConfigMap", namespace, names.jwks_config_map)
    ring_seen = await kube.read("Secret", namespace, names.signing_keys)
    token_seen = await kube.read("Secret", namespace, names.service_token)
    stored = None if ring_seen is None else ring_seen.data
    ring = _parse_ring(stored, names.signing_keys)
    retained = _retained(stored, now)
    ring, restaged = _restage_unpublished(ring, jwks_seen, now)
    token = (token_seen.data if token_seen else {}).get(c.TOKEN_KEY)
    recovered = 0
    if ring is None and _token_alive(token, now):
        old = await _published_keys(kube, namespace, names)
        if old:
            # The ring is gone but its public keys and a live token are not: never an
            # instant swap (see the module's docstring).
            plan = plan_recovery(now)
            retained = [{"jwk": k, "until": now + policy.overlap_s} for k in old]
            recovered = len(old)
        else:
            plan = plan_rotation(None, policy, now)
    elif ring is not None and not ring.by_stage("current") and not _token_alive(token, now):
        # Recovering, but the old token has expired meanwhile: nothing in flight to protect,
        # so the next key signs now rather than leaving the agent without a token.
        plan = plan_rotation(ring, RotationPolicy(policy.interval_s, 0, policy.overlap_s), now)
    else:
        plan = plan_rotation(ring, policy, now)

    jwks_doc = plan.ring.public_jwks()
    known = {k["kid"] for k in jwks_doc["keys"]}
    jwks_doc["keys"] += [r["jwk"] for r in retained if r["jwk"].get("kid") not in known]
    jwks = json.dumps(jwks_doc, indent=2)
    if plan.changed or restaged:
        data = {c.RING_KEY: plan.ring.to_json()}
        if retained:
            data[c.RETAINED_KEY] = json.dumps(retained)
        await kube.write(owner, "Secret", names.signing_keys, data, "signing-keys", ring_seen)
    await kube.write(owner, "Secret", names.jwks_secret, {c.JWKS_KEY: jwks}, "jwks", jwks_seen)
    await kube.write(owner, "ConfigMap", names.jwks_config_map, {c.JWKS_KEY: jwks}, "jwks",
                     cm_seen)
    if recovered:
        kopf.warn(as_body(owner), reason="RingRecreated",
                  message=f"Secret {names.signing_keys} was missing: published next key "
                          f"{plan.ring.keys[0].kid} (signs in "
                          f"{policy.pre_publication_s:.0f}s) and kept {recovered} public "
                          f"key(s) from Secret {names.jwks_secret} for "
                          f"{policy.overlap_s:.0f}s; the live service token stays valid")
    who = metrics.resource(body)
    for action in plan.actions:
        kopf.info(as_body(owner), reason=EVENT_REASONS[action.verb], message=action.describe())
        metrics.ROTATIONS.labels(who, action.verb).inc()

    reason = None
    if plan.ring.by_stage("current"):
        reason = renewal_reason(token, plan.ring, spec.service_token, now)
    if reason is not None:
        token = sign_service_token(
            plan.ring, issuer=spec.service_token.issuer, audience=spec.service_token.audience,
            subject=spec.service_token.subject, lifetime_s=spec.service_token.lifetime_seconds,
            now=now,
        )
    assert token is not None
    # The resume keys rotate on the same schedule, beside the token (resume_keys.py); the
    # write is skipped when neither changed.
    resume = resume_keys.plan(resume_keys.parse(token_seen.data if token_seen else {}, now),
                              policy, now)
    await kube.write(owner, "Secret", names.service_token,
                     {c.TOKEN_KEY: token, **resume.data()}, "service-token", token_seen)
    for verb, key_id in resume.actions:
        kopf.info(as_body(owner), reason=RESUME_EVENT_REASONS[verb],
                  message=f"resume key {key_id} {RESUME_EVENT_WORDS[verb]}")
    header, claims = read_claims(token) or ({}, {})
    refresh_at = claims["exp"] - spec.service_token.refresh_margin_seconds
    if reason is not None:
        kopf.info(as_body(owner), reason="TokenRenewed",
                  message=f"service token re-minted ({reason}); key {header.get('kid')}, "
                          f"expires {iso(claims['exp'])}")
        metrics.TOKEN_RENEWALS.labels(who).inc()
    metrics.TOKEN_EXPIRES.labels(who).set(claims["exp"])
    metrics.TOKEN_REFRESH.labels(who).set(refresh_at)
    metrics.NEXT_TRANSITION.labels(who).set(next_due(plan.ring, policy))

    _write_status(patch, status, plan, policy, now, header, claims, refresh_at, spec_valid)
    last = (iso(now) if resume.actions
            else (status.get("resumeKeys") or {}).get("lastRotationAt"))
    patch.status["resumeKeys"] = resume_keys.status(resume, policy, last)


async def _published_keys(kube: Kube, namespace: str, names: Names) -> list[dict[str, Any]]:
    """The public keys the JWKS Secret (else the ConfigMap) still lists."""
    for read, name in ((kube.read_secret, names.jwks_secret),
                       (kube.read_config_map, names.jwks_config_map)):
        data = await read(namespace, name)
        try:
            keys = json.loads((data or {}).get(c.JWKS_KEY) or "{}").get("keys") or []
        except (ValueError, AttributeError):
            continue
        keys = [k for k in keys if isinstance(k, dict) and k.get("kid")]
        if keys:
            return keys
    return []


def _restage_unpublished(ring: KeyRing | None, jwks: Seen | None,
                         now: float) -> tuple[KeyRing | None, bool]:
    """Next keys the JWKS Secret does not list yet (a pass stored the ring and stopped before
    publishing) start their pre-publication now: it counts from publication."""
    if ring is None:
        return ring, False
    try:
        listed = {k.get("kid") for k in json.loads(
            (jwks.data if jwks else {}).get(c.JWKS_KEY) or "{}").get("keys") or []}
    except (ValueError, AttributeError):
        listed = set()
    late = [k for k in ring.by_stage("next") if k.kid not in listed]
    if not late:
        return ring, False
    keys = tuple(replace(k, stage_since=now) if k in late else k for k in ring.keys)
    return KeyRing(keys=keys), True


def _retained(stored: dict[str, str] | None, now: float) -> list[dict[str, Any]]:
    """Recovered public keys still within their overlap."""
    try:
        entries = json.loads((stored or {}).get(c.RETAINED_KEY) or "[]")
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("jwk"), dict)
            and float(e.get("until") or 0) > now]


def _parse_ring(stored: dict[str, str] | None, secret: str) -> KeyRing | None:
    if stored is None or c.RING_KEY not in stored:
        return None  # absent, or as the chart creates it: empty
    try:
        ring = KeyRing.from_json(stored[c.RING_KEY])
        if ring.by_stage("current") or not ring.by_stage("next"):
            ring.current()  # exactly one current key, unless recovering (next only)
        return ring
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptRing(f"Secret {secret} holds no readable key ring "
                          f"({type(e).__name__}); fix or delete it") from None


def _write_status(patch: kopf.Patch, status: dict[str, Any], plan: Plan,
                  policy: RotationPolicy, now: float, header: dict[str, Any],
                  claims: dict[str, Any], refresh_at: float,
                  spec_valid: dict[str, Any]) -> None:
    ring = plan.ring
    by_stage = {s: [k.kid for k in ring.by_stage(s)] for s in ("next", "current", "previous")}
    last = iso(now) if plan.changed else (status.get("keys") or {}).get("lastRotationAt")
    patch.status["keys"] = {
        "ring": [{"kid": k.kid, "stage": k.stage, "since": iso(k.stage_since)}
                 for k in ring.keys],
        "current": ring.current().kid if ring.by_stage("current") else None,
        "nextTransitionAt": iso(next_due(ring, policy)),
        "lastRotationAt": last,
    }
    patch.status["token"] = {
        "kid": header.get("kid"), "issuedAt": iso(claims["iat"]),
        "expiresAt": iso(claims["exp"]), "refreshAt": iso(refresh_at),
    }
    message = "; ".join(f"{s}: {', '.join(v)}" for s, v in by_stage.items() if v)
    _set_conditions(patch, status, [
        condition(c.KEYS_ROTATED, True, "KeysPublished", message, now),
        condition(c.TOKEN_FRESH, True, "TokenValid",
                  f"expires {iso(claims['exp'])}, renewed from {iso(refresh_at)}", now),
        spec_valid,
    ], now)


def _fail(body: kopf.Body, patch: kopf.Patch, status: dict[str, Any], reason: str,
          message: str, now: float, spec_valid: dict[str, Any] | None = None) -> None:
    """Conditions false with the reason; an Event only when the failure is new."""
    prev = current_conditions(status).get(c.KEYS_ROTATED)
    if not prev or prev.get("reason") != reason or prev.get("message") != message:
        kopf.warn(as_body(body), reason=reason, message=message)
    # The token already minted stays usable until it expires; say so rather than alarm.
    expires = parse_iso((status.get("token") or {}).get("expiresAt"))
    token = (condition(c.TOKEN_FRESH, True, "TokenValid",
                       f"expires {iso(expires)}; renewal blocked: {reason}", now)
             if expires is not None and expires > now
             else condition(c.TOKEN_FRESH, False, reason, message, now))
    spec = spec_valid or (condition(c.SPEC_VALID, False, reason, message, now)
                          if reason == "InvalidSpec" else None)
    _set_conditions(patch, status, [
        condition(c.KEYS_ROTATED, False, reason, message, now), token,
        *([spec] if spec else [])], now)


def _set_conditions(patch: kopf.Patch, status: dict[str, Any], new: list[dict[str, Any]],
                    now: float) -> None:
    """Ours per key, and the list (this timer is its one writer) rebuilt from the map."""
    patch.status["conditionsByType"] = own_conditions(status, new, now)
    patch.status["conditions"] = merge_conditions(status, new, now)
