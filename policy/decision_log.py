"""The decision log: one JSON line per decision, on stdout and optionally appended to a file.

Fields: ts, decision_id, request_id, service.sub, user.sub, roles, env, source_env, context,
tool, args_digest, decision, reason_code, risk, confirmation_required, policy_revision,
latency_us. Arguments are logged as a digest (they may hold names or free text) and tokens
never appear. What a decision depended on is logged so `agentchat policy replay` can decide it
again: the roles as read, the environment, a migration's source environment (`source_env`,
only ever a catalog environment's name, else null), the tool and the context.
"""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from agentchat.digest import args_digest

from .engine import Decision


class DecisionLog:
    def __init__(self, *, stdout: bool = True, path: Path | None = None) -> None:
        self._streams: list[BinaryIO] = []
        self._file: BinaryIO | None = None
        if stdout:
            self._streams.append(sys.stdout.buffer)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "ab")
            self._streams.append(self._file)
        self._lock = threading.Lock()

    def write(self, decision: Decision, *, service_sub: str | None, user_sub: str | None,
              roles: list[str], env: str | None, arguments: dict[str, Any],
              latency_us: int, context: dict[str, Any] | None = None,
              source_env: str | None = None) -> None:
        line = orjson.dumps({
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "decision_id": decision.decision_id,
            "request_id": decision.request_id,
            "service.sub": service_sub,
            "user.sub": user_sub,
            "roles": roles,
            "env": env,
            "source_env": source_env,
            "context": context if context is not None else {"untrusted": False},
            "tool": decision.tool,
            "args_digest": args_digest(arguments),
            "decision": decision.decision,
            "reason_code": decision.reason_code,
            "risk": decision.risk,
            "confirmation_required": decision.confirmation_required,
            "policy_revision": decision.policy_revision,
            "latency_us": latency_us,
        }) + b"\n"
        with self._lock:
            for stream in self._streams:
                # Flushed per line: a crash must not lose the record of a decision it made.
                stream.write(line)
                stream.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
