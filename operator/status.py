"""Status helpers: Kubernetes-style conditions and timestamps.

Each timer writes only its own sections of `status` and its own conditions, merged into the
list it last saw; `Ready` is derived (keys and token in order), so a lost race between the two
timers heals on the next tick.
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


def merge_conditions(status: Mapping[str, Any] | None, new: list[dict[str, Any]],
                     now: float) -> list[dict[str, Any]]:
    """The condition list with `new` applied; a condition keeps its lastTransitionTime while
    its status stays the same. `Ready` follows KeysRotated and TokenFresh."""
    old = {cond.get("type"): dict(cond) for cond in (status or {}).get("conditions") or []}
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
