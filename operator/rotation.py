"""Key-stage logic over agentchat.keys.KeyRing (docs/protocol.md §8), pure: no I/O, time passed in.

A key's life: **next** (published in the JWKS, signs nothing) → **current** (signs) →
**previous** (verifies only) → gone. Each transition is due from the key's own `stage_since`:

- a next key appears `pre_publication_s` before the current key's rotation is due;
- it becomes current once the current key is `interval_s` old *and* it has itself been
  published for `pre_publication_s` (a restart that missed the pre-publication never
  promotes an unpublished key: it publishes, then waits);
- a previous key leaves `overlap_s` after it stopped signing (at least a token's lifetime).

Callers publish the JWKS of the planned ring *before* storing the ring, so every key that can
sign, or whose tokens are still alive, is always in the published JWKS.

A ring Secret that went missing (deleted by accident, a partial backup restore) while a token
signed by its current key is still alive is never answered with an instant swap:
`plan_recovery` starts a ring with a published **next** key only, and it becomes current after
the usual pre-publication (the live token keeps working meanwhile, its key kept in the JWKS
from the public keys the handler recovers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agentchat.keys import KeyRing, SigningKey, new_key


@dataclass(frozen=True)
class RotationPolicy:
    interval_s: float
    pre_publication_s: float
    overlap_s: float


@dataclass(frozen=True)
class Action:
    verb: str  # created | published | promoted | retired
    kid: str

    def describe(self) -> str:
        return {
            "created": "created current key {kid}",
            "published": "published next key {kid} (signs nothing yet)",
            "promoted": "key {kid} now signs (current)",
            "retired": "removed previous key {kid} (its tokens have expired)",
        }[self.verb].format(kid=self.kid)


@dataclass(frozen=True)
class Plan:
    ring: KeyRing
    actions: tuple[Action, ...]

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def _restage(key: SigningKey, stage: str, now: float) -> SigningKey:
    return replace(key, stage=stage, stage_since=now)


def plan_rotation(ring: KeyRing | None, policy: RotationPolicy, now: float) -> Plan:
    """What the ring should be at `now`, and the transitions that get it there."""
    actions: list[Action] = []
    keys = list(ring.keys) if ring else []

    if not [k for k in keys if k.stage == "current"]:
        # A ring with no signing key: promote a published next key if one is old enough;
        # a recovering ring (next only, not published long enough) waits; otherwise start
        # with a fresh current key (first create).
        ready = [k for k in keys if k.stage == "next"
                 and now - k.stage_since >= policy.pre_publication_s]
        if ready:
            keys = [_restage(k, "current", now) if k is ready[0] else k for k in keys]
            actions.append(Action("promoted", ready[0].kid))
        elif [k for k in keys if k.stage == "next"]:
            return Plan(ring=KeyRing(keys=tuple(keys)), actions=())
        else:
            key = new_key("current", now=now)
            keys.append(key)
            actions.append(Action("created", key.kid))

    kept: list[SigningKey] = []
    for k in keys:
        if k.stage == "previous" and now - k.stage_since >= policy.overlap_s:
            actions.append(Action("retired", k.kid))
        else:
            kept.append(k)
    keys = kept

    current = next(k for k in keys if k.stage == "current")
    nxt = next((k for k in keys if k.stage == "next"), None)
    if (nxt is not None and now - current.stage_since >= policy.interval_s
            and now - nxt.stage_since >= policy.pre_publication_s):
        keys = [
            _restage(k, "previous", now) if k is current
            else _restage(k, "current", now) if k is nxt else k
            for k in keys
        ]
        actions.append(Action("promoted", nxt.kid))
        current, nxt = next(k for k in keys if k.stage == "current"), None

    if nxt is None and now >= current.stage_since + policy.interval_s - policy.pre_publication_s:
        key = new_key("next", now=now)
        keys.append(key)
        actions.append(Action("published", key.kid))

    return Plan(ring=KeyRing(keys=tuple(keys)), actions=tuple(actions))


def plan_recovery(now: float) -> Plan:
    """A ring for a missing ring Secret while tokens of the lost key are alive: one next key,
    published now, signing once it has been published for the pre-publication delay."""
    key = new_key("next", now=now)
    return Plan(ring=KeyRing(keys=(key,)), actions=(Action("published", key.kid),))


def next_due(ring: KeyRing, policy: RotationPolicy) -> float:
    """The earliest time at which `plan_rotation` would change this ring."""
    if not ring.by_stage("current"):
        return min(k.stage_since + policy.pre_publication_s for k in ring.by_stage("next"))
    current = ring.current()
    times: list[float] = [k.stage_since + policy.overlap_s for k in ring.by_stage("previous")]
    nxt = ring.by_stage("next")
    if nxt:
        times.append(max(current.stage_since + policy.interval_s,
                         nxt[0].stage_since + policy.pre_publication_s))
    else:
        times.append(current.stage_since + policy.interval_s - policy.pre_publication_s)
    return min(times)
