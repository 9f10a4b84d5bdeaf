"""`drive_fleet`: one workload served by N engine replicas behind a router, in simulated
time (SGLang's `--dp-size` without attention DP, or N servers behind the SGLang router).

Each replica is its own `Scheduler` (its own KV cache and radix cache) and runner, run by its
own `sim.run.driver.EngineLoop`, admitting what it was sent at its scheduling points as a lone
engine admits the workload.

- A router that reads the replicas' loads (`Router.reads_load`: least_load, power_of_two,
  cache_aware) decides at each arrival: the fleet's arrival process asks it, with the loads
  at that instant in view, puts the request in the chosen replica's inbox and wakes the
  replica if it waits. Routing is also done on demand: a replica reaching a scheduling
  point at an arrival's instant routes it first, so which event SimPy takes first at that
  instant changes nothing. The replicas run step by step (N > 1): a decode run applied at
  its start would show the router a replica some steps ahead of the instant.
- A router that reads no load (round_robin, random) decides from the arrival order alone,
  the same at any time, so every request is routed before the run; the replicas then never
  interact and each runs alone, with decode runs, in an environment of its own.

One replica behind any router is today's single engine: the same trace, bit for bit
(tests/test_sim_fleet.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import simpy
from tqdm import tqdm

from sim.run.arrival_source import WorkloadArrivals
from sim.run.driver import (
    PROGRESS_DELAY_S,
    EngineLoop,
    FinishedHook,
    check_all_finished,
    check_workload,
    cyclic_gc_paused,
    supports_decode_runs,
    wait_until,
)

if TYPE_CHECKING:
    from shared.loop.model_runner import ModelRunner
    from shared.loop.scheduler import Scheduler
    from shared.loop.scheduler_load import SchedulerLoad
    from shared.trace.trace import Trace
    from shared.workload.workload import Workload, WorkloadRequest
    from sim.routers.base import Router


class Replica(NamedTuple):
    scheduler: Scheduler
    runner: ModelRunner
    finished_hook: FinishedHook | None = None


class FleetRun(NamedTuple):
    traces: list[Trace]          # one per replica, in replica order
    replica_of: dict[str, int]   # the router's decision for every request


def drive_fleet(replicas: Sequence[Replica], workload: Workload, router: Router, *,
                progress: bool = False, decode_runs: bool = True) -> FleetRun:
    """Serve `workload` on `replicas` behind `router` until every request finished.
    Raises ValueError for an empty workload or fleet, InvalidRequestError (naming the
    request, before anything runs) for one a replica could never serve, RuntimeError if a
    replica stalls or the router returns an index outside the fleet."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    if not replicas:
        raise ValueError("a fleet needs at least one replica")
    for r in replicas:
        check_workload(r.scheduler, workload)
    with cyclic_gc_paused(), tqdm(total=len(workload), desc="simulate", unit="req",
                                  delay=PROGRESS_DELAY_S, disable=not progress) as bar:
        if router.reads_load or workload.followups:
            replica_of = _routed_at_arrival(replicas, workload, router, bar, decode_runs)
        else:
            replica_of = _routed_up_front(replicas, workload, router, bar, decode_runs)
    traces = [r.scheduler.trace for r in replicas]
    check_all_finished(workload, traces)
    return FleetRun(traces, replica_of)


def _routed_at_arrival(replicas: Sequence[Replica], workload: Workload, router: Router,
                       bar: tqdm, decode_runs: bool) -> dict[str, int]:
    """A router that reads the loads, or a workload whose follow-ups wait for replies,
    decides at each arrival (the fleet's process), all replicas in one environment."""
    env = simpy.Environment()
    fleet = FleetArrivals(env, workload.requests, router, [r.scheduler for r in replicas],
                          workload.followups)
    fleet.loops = [make_loop(env, r, fleet.inboxes[i], bar, decode_runs and len(replicas) == 1)
                   for i, r in enumerate(replicas)]
    if workload.followups:
        for loop, r in zip(fleet.loops, replicas, strict=True):
            loop.on_finished = fleet.replies_from(r.scheduler)
    env.process(fleet.arrivals())
    env.run(until=env.all_of([env.process(loop.engine()) for loop in fleet.loops]))
    fleet.close()
    return fleet.replica_of


def _routed_up_front(replicas: Sequence[Replica], workload: Workload, router: Router,
                     bar: tqdm, decode_runs: bool) -> dict[str, int]:
    """A router that reads no load decides from the arrival order alone, the same at any
    time: every request is routed before the run. The replicas then never interact, so each
    runs in an environment of its own, one after the other, reading its share of the
    workload as a lone engine reads the whole (decode runs cut at its own arrivals)."""
    view = _StaticFleet(len(replicas))
    replica_of = {r.rid: _checked(router, r, router.route(r, view), len(replicas))
                  for r in workload.requests}
    for i, r in enumerate(replicas):
        env = simpy.Environment()
        mine = [q for q in workload.requests if replica_of[q.rid] == i]
        loop = make_loop(env, r, WorkloadArrivals(mine), bar, decode_runs)
        arrivals = loop.arrivals()
        env.process(arrivals)
        env.run(until=env.process(loop.engine()))
        arrivals.close()  # NOTE: as drive_workload: its frame holds the loop in a cycle
    return replica_of


def make_loop(env: simpy.Environment, r: Replica, source, bar: tqdm, decode_runs: bool
          ) -> EngineLoop:
    loop = EngineLoop(env, r.scheduler, r.runner, source, None, r.finished_hook, bar)
    loop.decode_runs = decode_runs and supports_decode_runs(r.runner, None, r.finished_hook)
    return loop


class _StaticFleet:
    """The view of a router that reads no load: the fleet's size only."""

    def __init__(self, n: int) -> None:
        self.num_replicas = n

    def load(self, replica: int) -> SchedulerLoad:
        raise RuntimeError("this router declared reads_load = False but read a load")


def _checked(router: Router, request: WorkloadRequest, i: object, n: int) -> int:
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
        self.loops: list[EngineLoop] = []
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
        queued: what it reports plus what the router sent it since."""
        load, pending = self.schedulers[replica].load(), self.inboxes[replica].pending
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
        i = _checked(self.router, request, self.router.route(request, self), self.num_replicas)
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
