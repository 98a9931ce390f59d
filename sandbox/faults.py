"""Fault injection (sandbox mode only): make the next calls of an operation fail or stall.

A fault `{operation, status?, times, delay_s?, garbage?}` applies to the next `times` calls of
the operation, before anything executes: wait `delay_s`, then answer `status` (e.g. 502) or a
200 with a body that is not JSON (`garbage`), or, with neither, go on and execute. Faults for
one operation queue up in the order they were posted.
"""

from __future__ import annotations

from collections import deque

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation: str
    status: int | None = Field(default=None, ge=400, le=599)
    times: int = Field(default=1, ge=1, le=1000)
    delay_s: float | None = Field(default=None, ge=0, le=600)
    garbage: bool = False

    @model_validator(mode="after")
    def _does_something(self) -> Fault:
        if self.status is None and not self.delay_s and not self.garbage:
            raise ValueError("a fault needs status, delay_s or garbage")
        if self.status is not None and self.garbage:
            raise ValueError("status and garbage exclude each other")
        return self


class FaultBoard:
    def __init__(self) -> None:
        self._queues: dict[str, deque[Fault]] = {}

    def add(self, fault: Fault) -> None:
        self._queues.setdefault(fault.operation, deque()).append(fault.model_copy())

    def take(self, operation: str) -> Fault | None:
        """The fault for this call, if any, counting it against its `times`."""
        queue = self._queues.get(operation)
        if not queue:
            return None
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.popleft()
        return fault

    def pending(self) -> list[dict[str, object]]:
        return [f.model_dump() for q in self._queues.values() for f in q]

    def clear(self) -> None:
        self._queues.clear()
