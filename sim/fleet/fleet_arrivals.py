"""`FleetArrivals`: a fleet's workload cursor, its router and one `Inbox` per replica, for
routers that decide at each arrival (`sim.fleet.driver`); the `FleetView` its router sees.

A request is routed at its arrival time, by the fleet's arrival process or, at that same
instant, by a replica reaching a scheduling point first (`Inbox.due`), with every replica's
load as of that instant: its scheduler's (`ReplicaLoop.load`) plus what the router sent it
that it has not admitted yet.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.run.arrival_source import WorkloadArrivals
from sim.run.driver import wait_until

if TYPE_CHECKING:
    import simpy

    from shared.loop.scheduler import Scheduler
    from shared.loop.scheduler_load import SchedulerLoad
    from shared.workload.workload import WorkloadRequest
    from sim.fleet.replica_loop import ReplicaLoop
    from sim.routers.base import Router


def checked_route(router: Router, request: WorkloadRequest, i: object, n: int) -> int:
    """`i`, the replica `router` chose for `request`; RuntimeError naming both unless it is
    one of the fleet's `n`."""
    if not (isinstance(i, int) and 0 <= i < n):
        raise RuntimeError(f"router {router.name!r} sent request {request.rid!r} to "
                           f"replica {i!r}; the fleet has {n}")
    return i


class Inbox:
    """One replica's `sim.run.arrival_source.ArrivalSource`: the requests routed to it by its
    fleet (anything with `route_until(now)` and `next_arrival()`)."""

    def __init__(self, fleet) -> None:
        self.fleet = fleet
        self.pending: deque[WorkloadRequest] = deque()

    def due(self, now: float) -> list[WorkloadRequest]:
        """The routed requests that arrived by `now` (those routed since stay for later)."""
        self.fleet.route_until(now)
        due = []
        while self.pending and self.pending[0].arrival_time <= now:
            due.append(self.pending.popleft())
        return due

    def next_arrival(self) -> float:
        return self.pending[0].arrival_time if self.pending else self.fleet.next_arrival()


class FleetArrivals:
    """The workload's cursor, the router and the replicas' inboxes; the `FleetView` the
    router sees (`num_replicas`, `load(i)`)."""

    def __init__(self, env: simpy.Environment, requests: Sequence[WorkloadRequest],
                 router: Router, schedulers: Sequence[Scheduler], followups=()) -> None:
        self.env, self.router = env, router
        self.queue = WorkloadArrivals(requests, followups)
        self.schedulers = schedulers
        self.inboxes = [Inbox(self) for _ in schedulers]
        self.loops: list[ReplicaLoop] = []
        self.replica_of: dict[str, int] = {}

    @property
    def num_replicas(self) -> int:
        return len(self.schedulers)

    def close(self) -> None:
        """Drop the loops and inboxes once the run is over. NOTE: an inbox calls back into
        its fleet and the fleet holds the loops that read the inboxes: cycles that would
        keep the replicas (their KV pools) alive after the run, as a run pauses the cyclic
        collector and hands what it made to the oldest generation (`cyclic_gc_paused`)."""
        self.loops, self.inboxes = [], []

    def load(self, replica: int) -> SchedulerLoad:
        """The replica's scheduler load, its inbox (routed, not yet admitted) counted as
        queued: what it reports plus what the router sent it since. NOTE: the loops'
        (`ReplicaLoop.load`), so `loops` must be set before the first arrival."""
        load, pending = self.loops[replica].load(), self.inboxes[replica].pending
        if not pending:
            return load
        return load._replace(queued_requests=load.queued_requests + len(pending),
                             queued_tokens=load.queued_tokens
                             + sum(len(r.input_ids) for r in pending))

    def next_arrival(self) -> float:
        """The next arrival; now while follow-ups wait for replies still being generated
        (their time is not known yet), math.inf once nothing more will come."""
        t = self.queue.next_arrival()
        if t == math.inf and self.queue.waiting_on_replies:
            return self.env.now
        return t

    def route_until(self, now: float) -> None:
        """Route every request that arrived by `now`, in order, waking its replica; once
        nothing more will come, wake every replica (those left idle can finish)."""
        due = self.queue.due(now)
        for r in due:
            self._route(r)
        if due and self.next_arrival() == math.inf:
            for loop in self.loops:
                loop.wake()

    def replies_from(self, scheduler: Scheduler):
        """The finished-requests hook of one replica: release their follow-ups, each routed
        at its arrival."""
        def hook(done: list) -> None:
            for r in self.queue.finished(done, scheduler.trace.requests, scheduler.check_request):
                self.env.process(self._arrive(r.arrival_time))
            if self.next_arrival() == math.inf:
                for loop in self.loops:
                    loop.wake()
        return hook

    def _arrive(self, t: float):
        yield from wait_until(self.env, t)
        self.route_until(self.env.now)

    def _route(self, request: WorkloadRequest) -> None:
        i = checked_route(self.router, request, self.router.route(request, self), self.num_replicas)
        self.replica_of[request.rid] = i
        self.inboxes[i].pending.append(request)
        self.loops[i].wake()

    def arrivals(self):
        """Route each of the workload's requests at its arrival time (follow-ups get a
        process of their own when released: `replies_from`)."""
        env = self.env
        for r in self.queue.requests:
            yield from wait_until(env, r.arrival_time)
            self.route_until(env.now)
