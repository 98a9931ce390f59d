"""Status helpers: Kubernetes-style conditions and timestamps.

Conditions are patched per key: each timer writes its own conditions into the map
`status.conditionsByType` (a merge patch touches only those keys, so one timer never puts back
a stale copy of the other's), and only the rotate timer writes the Kubernetes-style list
`status.conditions`, rebuilt from that map. The list may lag the map by one tick; the map never
regresses. `Ready` is derived (keys and token in order).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from agentchat.operator import constants as c


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def parse_iso(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def condition(type_: str, ok: bool, reason: str, message: str, now: float) -> dict[str, Any]:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason,
            "message": message, "lastTransitionTime": iso(now)}


def current_conditions(status: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """type -> condition: the list, overridden per key by the map (always the fresher)."""
    status = status or {}
    out = {cond.get("type"): dict(cond) for cond in status.get("conditions") or []}
    by_type = status.get("conditionsByType")
    if isinstance(by_type, Mapping):
        out.update({str(k): dict(v) for k, v in by_type.items() if isinstance(v, Mapping)})
    return out


def own_conditions(status: Mapping[str, Any] | None, new: list[dict[str, Any]],
                   now: float) -> dict[str, dict[str, Any]]:
    """`new` (and Ready) as they go into `status.conditionsByType`."""
    types = {cond["type"] for cond in new} | {c.READY}
    return {x["type"]: x for x in merge_conditions(status, new, now) if x["type"] in types}


def merge_conditions(status: Mapping[str, Any] | None, new: list[dict[str, Any]],
                     now: float) -> list[dict[str, Any]]:
    """The condition list with `new` applied; a condition keeps its lastTransitionTime while
    its status stays the same. `Ready` follows KeysRotated and TokenFresh."""
    old = current_conditions(status)
    for cond in new:
        prev = old.get(cond["type"])
        if prev and prev.get("status") == cond["status"]:
            cond = {**cond, "lastTransitionTime": prev.get("lastTransitionTime",
                                                            cond["lastTransitionTime"])}
        old[cond["type"]] = cond
    keys, token = old.get(c.KEYS_ROTATED), old.get(c.TOKEN_FRESH)
    ready_ok = bool(keys and token and keys["status"] == token["status"] == "True")
    if ready_ok:
        ready = condition(c.READY, True, "KeysAndTokenReady",
                          "signing keys published and service token fresh", now)
    else:
        failing = [x for x in (keys, token) if x is None or x["status"] != "True"]
        reason = failing[0]["reason"] if failing and failing[0] else "Pending"
        ready = condition(c.READY, False, reason, "keys or service token not ready", now)
    prev = old.get(c.READY)
    if prev and prev.get("status") == ready["status"]:
        ready["lastTransitionTime"] = prev.get("lastTransitionTime", ready["lastTransitionTime"])
    old[c.READY] = ready
    return [old[t] for t in c.CONDITION_TYPES if t in old]
