"""`ArrivalSource`: where an engine loop (`sim.driver.EngineLoop`) takes its requests from.

Contract: `due(now)` returns, in arrival order, the requests that reached this engine at or
before `now` and were not returned before; `next_arrival()` is the earliest time a request
not yet returned could reach it (math.inf when none will). A single engine reads the whole
workload (`WorkloadArrivals`); a fleet's replica reads what the router sent it
(`sim.fleet_driver`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shared.workload import WorkloadRequest


class ArrivalSource(Protocol):
    def due(self, now: float) -> list[WorkloadRequest]: ...

    def next_arrival(self) -> float: ...


class WorkloadArrivals:
    """Every request of a workload, at its arrival time (a cursor over the list)."""

    def __init__(self, requests: Sequence[WorkloadRequest]) -> None:
        self.requests, self.next = requests, 0

    def due(self, now: float) -> list[WorkloadRequest]:
        reqs, i = self.requests, self.next
        while i < len(reqs) and reqs[i].arrival_time <= now:
            i += 1
        due, self.next = reqs[self.next:i], i
        return list(due)

    def next_arrival(self) -> float:
        return self.requests[self.next].arrival_time if self.next < len(self.requests) else math.inf
