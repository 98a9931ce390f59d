"""The resume keys, pure: no I/O, time passed in.

They seal the user token a live run keeps for its takeover (agent/storage/sealing.py). The
service-token Secret's `resume-key` holds one secret per line, and the agent reads them as a
MultiFernet: **the first line seals, every line opens**. The lines are the current key, then
the previous ones newest first, then, while it is being published, the next key.

They rotate on the signing keys' schedule (`rotationIntervalSeconds`, `prePublicationSeconds`;
rotation.py), in the same stages and for the same reason: kubelet takes up to about two minutes
to update a mounted Secret, so a new key is first listed last (it opens, seals nothing) for the
pre-publication delay, and only then moves to the front. A replica that has not seen the new
file yet can still open whatever an updated one sealed. At most `KEPT` lines in all: listing a
next key drops the oldest previous one, which stopped sealing an interval or more before.

Beside the lines, `resume-keys.json` records each key's stage and since (by a short hash of
the key, never the key), so that the schedule survives restarts; the pods do not mount it.
A `resume-key` without it (an operator before key lists: one line) is taken as the current key.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, replace
from typing import Any

from agentchat.operator import constants as c
from agentchat.operator.rotation import RotationPolicy
from agentchat.operator.status import iso

KEPT = 3  # lines in all: current, previous and next together


@dataclass(frozen=True)
class ResumeKey:
    secret: str
    stage: str  # next | current | previous
    since: float

    @property
    def id(self) -> str:
        """What status and Events show: a short hash, never the key."""
        return hashlib.sha256(self.secret.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ResumePlan:
    keys: tuple[ResumeKey, ...]  # in file order: current, previous newest first, next
    actions: tuple[tuple[str, str], ...]  # (verb, id): created | published | promoted | retired

    def data(self) -> dict[str, str]:
        """The service-token Secret's keys for these resume keys."""
        return {
            c.RESUME_KEY: "".join(k.secret + "\n" for k in self.keys),
            c.RESUME_KEYS_KEY: json.dumps([{"id": k.id, "stage": k.stage, "since": k.since}
                                           for k in self.keys]),
        }


def new_key(stage: str, now: float) -> ResumeKey:
    return ResumeKey(secret=secrets.token_urlsafe(48), stage=stage, since=now)


def parse(data: dict[str, str], now: float) -> tuple[ResumeKey, ...]:
    """The keys a Secret holds, stages from `resume-keys.json`; a line it does not list is
    current when first (an older operator's single key, since now) and previous otherwise."""
    lines = [line.strip() for line in (data.get(c.RESUME_KEY) or "").splitlines()
             if line.strip()]
    try:
        entries = json.loads(data.get(c.RESUME_KEYS_KEY) or "[]")
        known = {e["id"]: e for e in entries if isinstance(e, dict) and "id" in e}
    except (ValueError, TypeError, KeyError):
        known = {}
    keys = []
    for i, line in enumerate(lines):
        key = ResumeKey(secret=line, stage="current" if i == 0 else "previous", since=now)
        entry = known.get(key.id)
        if entry is not None and entry.get("stage") in ("next", "current", "previous"):
            key = replace(key, stage=str(entry["stage"]), since=float(entry.get("since") or now))
        keys.append(key)
    return tuple(keys)


def _ordered(keys: list[ResumeKey]) -> tuple[ResumeKey, ...]:
    rank = {"current": 0, "previous": 1, "next": 2}
    return tuple(sorted(keys, key=lambda k: (rank[k.stage], -k.since)))


def plan(keys: tuple[ResumeKey, ...], policy: RotationPolicy, now: float) -> ResumePlan:
    """What the keys should be at `now`, and the transitions that get them there."""
    actions: list[tuple[str, str]] = []
    ring = list(keys)
    current = [k for k in ring if k.stage == "current"]
    if len(current) != 1:
        # None (first create), or a hand-edited list: the newest opening key seals.
        ring = [replace(k, stage="previous") if k.stage == "current" else k for k in ring]
        opening = sorted((k for k in ring if k.stage == "previous"), key=lambda k: -k.since)
        if opening:
            ring = [replace(k, stage="current") if k is opening[0] else k for k in ring]
        else:
            ring.append(new_key("current", now))
            actions.append(("created", ring[-1].id))
    cur = next(k for k in ring if k.stage == "current")
    nxt = next((k for k in ring if k.stage == "next"), None)
    if (nxt is not None and now - cur.since >= policy.interval_s
            and now - nxt.since >= policy.pre_publication_s):
        ring = [replace(k, stage="previous", since=now) if k is cur
                else replace(k, stage="current", since=now) if k is nxt else k for k in ring]
        actions.append(("promoted", nxt.id))
        nxt = None
    elif nxt is None and now >= cur.since + policy.interval_s - policy.pre_publication_s:
        ring.append(new_key("next", now))
        actions.append(("published", ring[-1].id))
    ordered = list(_ordered(ring))
    while len(ordered) > KEPT:
        oldest = max((i for i, k in enumerate(ordered) if k.stage == "previous"), default=None)
        if oldest is None:
            break
        actions.append(("retired", ordered.pop(oldest).id))
    return ResumePlan(keys=tuple(ordered), actions=tuple(actions))


def next_due(keys: tuple[ResumeKey, ...], policy: RotationPolicy) -> float:
    cur = next(k for k in keys if k.stage == "current")
    nxt = next((k for k in keys if k.stage == "next"), None)
    if nxt is None:
        return cur.since + policy.interval_s - policy.pre_publication_s
    return max(cur.since + policy.interval_s, nxt.since + policy.pre_publication_s)


def status(resume: ResumePlan, policy: RotationPolicy, last: str | None) -> dict[str, Any]:
    """`status.resumeKeys`, as `status.keys` for the signing keys (ids, never keys)."""
    return {
        "ring": [{"id": k.id, "stage": k.stage, "since": iso(k.since)} for k in resume.keys],
        "current": resume.keys[0].id,
        "nextTransitionAt": iso(next_due(resume.keys, policy)),
        "lastRotationAt": last,
    }
