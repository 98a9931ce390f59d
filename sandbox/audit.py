"""The audit log: one record per request that got past authentication (docs/protocol.md §7).

`{ts, service_actor, user_actor, operation, env, args, outcome, idempotency_key,
decision_id, trace_id, cookie}`, oldest first; outcome is "ok", "error", "forbidden",
"replayed" or "not_found"; `decision_id` is the agent's `X-Decision-Id` (the policy decision
that let the call run, so this audit joins the agent's trail), null when not sent; `trace_id`
is the trace of the W3C `traceparent` the call carried (so a record finds its trace), null
without a valid one; `cookie` is the `Cookie` header the call carried (cut), null without one:
every answer sets a session cookie (gateway.py), and a client shared by users must never send
it back. Tests and the agent's tests count executions here, so an executed call is exactly
one "ok" record.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

OUTCOMES = ("ok", "error", "forbidden", "replayed", "not_found")


class AuditLog:
    def __init__(self) -> None:
        self._items: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, *, service_actor: str, user_actor: str, operation: str, env: str | None,
               args: dict[str, Any], outcome: str, idempotency_key: str | None,
               decision_id: str | None = None, trace_id: str | None = None,
               cookie: str | None = None) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown audit outcome {outcome!r}")
        item = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "service_actor": service_actor, "user_actor": user_actor, "operation": operation,
            "env": env, "args": args, "outcome": outcome, "idempotency_key": idempotency_key,
            "decision_id": decision_id, "trace_id": trace_id, "cookie": cookie,
        }
        with self._lock:
            self._items.append(item)

    def query(self, **filters: str | None) -> list[dict[str, Any]]:
        wanted = {k: v for k, v in filters.items() if v is not None}
        with self._lock:
            return [dict(i) for i in self._items if all(i.get(k) == v for k, v in wanted.items())]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
