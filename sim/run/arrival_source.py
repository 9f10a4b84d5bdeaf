"""`ArrivalSource`: where an engine loop (`sim.run.driver.EngineLoop`) takes its requests from.

Contract: `due(now)` returns, in arrival order, the requests that reached this engine at or
before `now` and were not returned before; `next_arrival()` is the earliest time a request
not yet returned could reach it (math.inf when none will). A single engine reads the whole
workload (`WorkloadArrivals`); a fleet's replica reads what the router sent it
(`sim.fleet.driver`).

`WorkloadArrivals` also holds a workload's follow-up turns (`shared.workload.workload.FollowUp`):
`finished(done, records)` turns each finished request's follow-up into a request, sent a
think time after the reply (the record's finish time), re-sending the history; a turn that
did not end normally ends its conversation (its follow-ups are dropped).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from shared.request.invalid_request import InvalidRequestError
from shared.trace.run_result import COMPLETED_FINISH_TYPES
from shared.workload.workload import arrival_times

if TYPE_CHECKING:
    from shared.request.req import Req
    from shared.trace.trace import RequestRecord
    from shared.workload.workload import WorkloadRequest


class ArrivalSource(Protocol):
    def due(self, now: float) -> list[WorkloadRequest]: ...

    def next_arrival(self) -> float: ...


class WorkloadArrivals:
    """A workload's requests at their arrival times (a cursor over the sorted list) and the
    follow-ups released as their turns finish (a heap by arrival time)."""

    def __init__(self, requests: Sequence[WorkloadRequest], followups: Iterable[Any] = ()) -> None:
        self.requests, self.next = requests, 0
        self.times = arrival_times(requests)      # [n] sorted: the cursor moves by search
        self._next_time = float(self.times[0]) if len(self.times) else math.inf
        self.pending = {f.after: f for f in followups}   # rid answered -> its follow-up
        self._later: list[tuple[float, int, WorkloadRequest]] = []
        self._count = 0
        self.refused: dict[str, str] = {}   # follow-ups an engine would refuse: rid -> why

    def due(self, now: float) -> list[WorkloadRequest]:
        due = []
        if self._next_time <= now:
            i = int(np.searchsorted(self.times, now, side="right"))   # first arriving later
            due, self.next = list(self.requests[self.next:i]), i
            self._next_time = float(self.times[i]) if i < len(self.times) else math.inf
        if self._later and self._later[0][0] <= now:
            while self._later and self._later[0][0] <= now:
                due.append(heapq.heappop(self._later)[2])
            due.sort(key=lambda r: r.arrival_time)   # NOTE: stable: the list's first on ties
        return due

    def next_arrival(self) -> float:
        t = self._next_time
        return min(t, self._later[0][0]) if self._later else t

    @property
    def waiting_on_replies(self) -> bool:
        """Follow-ups remain whose turn has not finished yet."""
        return bool(self.pending)

    def finished(self, done: Sequence[Req], records: Mapping[str, RequestRecord],
                 check: Callable[[Req], None]) -> list[WorkloadRequest]:
        """Release the follow-ups of the finished requests; returns the new requests.
        `check(req)` raises InvalidRequestError for one an engine would refuse (a history
        grown past the context): that conversation ends there, named in `refused`."""
        released = []
        for req in done:
            f = self.pending.pop(req.rid, None)
            if f is None:
                continue
            reason = req.finished_reason
            if reason is None or reason.type not in COMPLETED_FINISH_TYPES:
                self._drop_after(f.rid)
                continue
            r = f.request(req.origin_input_ids, req.output_ids, records[req.rid].finish_time)
            try:
                check(r.to_req())
            except InvalidRequestError as e:
                self.refused[r.rid] = str(e)
                self._drop_after(r.rid)
                continue
            self.add(r)
            released.append(r)
        return released

    def add(self, request: WorkloadRequest) -> None:
        self._count += 1
        heapq.heappush(self._later, (request.arrival_time, self._count, request))

    def _drop_after(self, rid: str) -> None:
        """The conversation ends at `rid`: its later follow-ups never come."""
        while (f := self.pending.pop(rid, None)) is not None:
            rid = f.rid
