"""Key stages over simulated time (pure logic), checked with the sidecar's verifier."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from agentchat.errors import TokenError
from agentchat.identity import JwksFile, service_verifier
from agentchat.keys import KeyRing, sign_service_token, write_atomic
from agentchat.operator.rotation import RotationPolicy, next_due, plan_rotation
from agentchat.settings import SharedSettings

POLICY = RotationPolicy(interval_s=100, pre_publication_s=20, overlap_s=50)
T0 = 1_800_000_000.0


def stages(ring: KeyRing) -> dict[str, list[str]]:
    return {s: [k.kid for k in ring.by_stage(s)] for s in ("next", "current", "previous")}


def test_lifecycle_next_current_previous_gone() -> None:
    plan = plan_rotation(None, POLICY, T0)
    assert [a.verb for a in plan.actions] == ["created"]
    first = plan.ring.current().kid
    # Nothing is due before interval - pre-publication.
    assert not plan_rotation(plan.ring, POLICY, T0 + 79).changed
    assert next_due(plan.ring, POLICY) == T0 + 80
    published = plan_rotation(plan.ring, POLICY, T0 + 80)
    assert [a.verb for a in published.actions] == ["published"]
    nxt = stages(published.ring)["next"][0]
    assert stages(published.ring)["current"] == [first]
    promoted = plan_rotation(published.ring, POLICY, T0 + 100)
    assert [a.verb for a in promoted.actions] == ["promoted"]
    assert stages(promoted.ring) == {"next": [], "current": [nxt], "previous": [first]}
    assert not plan_rotation(promoted.ring, POLICY, T0 + 149).changed
    retired = plan_rotation(promoted.ring, POLICY, T0 + 150)
    assert [a.verb for a in retired.actions] == ["retired"]
    assert first not in stages(retired.ring)["previous"]


def test_a_late_start_publishes_first_and_promotes_only_after_the_delay() -> None:
    """The operator was down past the rotation time: the next key still waits its delay."""
    ring = plan_rotation(None, POLICY, T0).ring
    late = plan_rotation(ring, POLICY, T0 + 500)
    assert [a.verb for a in late.actions] == ["published"]
    assert not plan_rotation(late.ring, POLICY, T0 + 519).changed
    assert [a.verb for a in plan_rotation(late.ring, POLICY, T0 + 520).actions] == ["promoted"]


def test_previous_key_verifies_until_the_overlap_ends(tmp_path: Path) -> None:
    ring = plan_rotation(None, POLICY, T0).ring
    ring = plan_rotation(ring, POLICY, T0 + 80).ring
    # Signed by the current key just before it is demoted; lifetime within the overlap.
    token = sign_service_token(ring, issuer="agentchat", audience="ss-tools", lifetime_s=3600)
    demoted = plan_rotation(ring, POLICY, T0 + 100).ring
    path = tmp_path / "jwks.json"
    settings = SharedSettings(service_jwks_path=path)
    verifier = service_verifier(settings, JwksFile(path))
    write_atomic(path, __import__("json").dumps(demoted.public_jwks()))
    assert verifier.verify(token).sub == "agentchat-agent"
    gone = plan_rotation(demoted, POLICY, T0 + 150).ring
    write_atomic(path, __import__("json").dumps(gone.public_jwks()))
    with pytest.raises(TokenError, match="unknown_kid"):
        verifier.verify(token)


def test_next_key_never_signs() -> None:
    ring = plan_rotation(plan_rotation(None, POLICY, T0).ring, POLICY, T0 + 80).ring
    token = sign_service_token(ring, issuer="i", audience="a")
    import jwt

    assert jwt.get_unverified_header(token)["kid"] == ring.current().kid
    assert ring.current().kid not in stages(ring)["next"]


def test_conditions_are_patched_per_key_and_a_stale_list_never_wins() -> None:
    """The prune timer writes only conditionsByType.Pruned; the rotate timer, whose view of
    the list may be a tick old, rebuilds the list from the map, so the newer Pruned stays."""
    from agentchat.operator import constants as c
    from agentchat.operator.status import condition, merge_conditions, own_conditions

    old_pruned = condition(c.PRUNED, False, "StorageUnavailable", "down", T0)
    new_pruned = condition(c.PRUNED, True, "Pruned", "ok", T0 + 20)
    status = {"conditions": [old_pruned],  # the list as the rotate timer last wrote it
              "conditionsByType": {c.PRUNED: new_pruned}}  # the pruner's newer key
    ours = [condition(c.KEYS_ROTATED, True, "KeysPublished", "", T0 + 30),
            condition(c.TOKEN_FRESH, True, "TokenValid", "", T0 + 30)]
    listed = {x["type"]: x for x in merge_conditions(status, ours, T0 + 30)}
    assert listed[c.PRUNED] == new_pruned
    assert listed[c.READY]["status"] == "True"
    # What each timer patches into the map: its own keys (and Ready) only.
    assert set(own_conditions(status, ours, T0 + 30)) == {c.KEYS_ROTATED, c.TOKEN_FRESH,
                                                            c.READY}
    assert set(own_conditions(status, [new_pruned], T0 + 30)) == {c.PRUNED, c.READY}


def test_resume_keys_rotate_in_stages_and_stay_bounded() -> None:
    """The resume keys (one a line, the first seals) on the signing keys' schedule: a new key is
    listed last for the pre-publication (opens only), then moves to the front; three lines at
    most; an older operator's single `resume-key` is taken as the current key."""
    from agentchat.operator import constants as c
    from agentchat.operator import resume_keys as rk

    def lines(p: rk.ResumePlan) -> list[str]:
        return p.data()[c.RESUME_KEY].splitlines()

    legacy = rk.plan(rk.parse({c.RESUME_KEY: "old-single-key"}, T0), POLICY, T0)
    assert lines(legacy) == ["old-single-key"] and legacy.actions == ()
    first = rk.plan(rk.parse({}, T0), POLICY, T0)
    assert [v for v, _ in first.actions] == ["created"]
    seen = [lines(first)]
    stored = first.data()
    for t in range(int(T0), int(T0) + 1000, 10):
        step = rk.plan(rk.parse(stored, t), POLICY, t)
        assert len(lines(step)) <= rk.KEPT
        if lines(step) != seen[-1]:
            seen.append(lines(step))
        stored = step.data()
    # published at 80 (last line), promoted at 100 (first line, the old one second), ...
    assert seen[1][0] == seen[0][0] and seen[1][-1] not in seen[0]
    assert seen[2][:2] == [seen[1][-1], seen[0][0]]
    assert [len(s) for s in seen[:6]] == [1, 2, 2, 3, 3, 3]
    # ... and once three: each publication drops the oldest, each promotion puts the new first.
    for before, after in itertools.pairwise(seen[4:]):
        if after[0] != before[0]:  # promoted: the listed key seals, the old one opens
            assert after[:2] == [before[-1], before[0]]
        else:  # published: a new last line instead of the oldest
            assert after[:-1] == before[:-1] and after[-1] not in before
    assert len(seen) >= 15  # two transitions per 100 s interval
    # The stages file names keys by a short hash, never by the key.
    stages = json.loads(stored[c.RESUME_KEYS_KEY])
    assert [e["stage"] for e in stages] == ["current", "previous", "previous"] or \
        [e["stage"] for e in stages] == ["current", "previous", "next"]
    assert not {e["id"] for e in stages} & set(seen[-1])
