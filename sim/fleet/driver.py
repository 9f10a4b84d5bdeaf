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
  its start would show the router a replica some steps ahead of the instant. A replica's
  load is computed once per change of its scheduler (`sim.fleet.replica_loop`): a replica
  waiting on its step shows the router the load it showed last, without work.
- A router that reads no load (round_robin, random) decides from the arrival order alone,
  the same at any time, so every request is routed before the run; the replicas then never
  interact and each runs alone, with decode runs, in an environment of its own.

The workload is checked before the run once per distinct replica (`check_fleet_workload`).
One replica behind any router is today's single engine: the same trace, bit for bit
(tests/test_sim_fleet.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import simpy
from tqdm import tqdm

from sim.fleet.fleet_arrivals import FleetArrivals, checked_route
from sim.fleet.replica_loop import Replica, make_loop
from sim.run.arrival_source import WorkloadArrivals
from sim.run.driver import (
    PROGRESS_DELAY_S,
    check_all_finished,
    check_workload,
    cyclic_gc_paused,
)

if TYPE_CHECKING:
    from shared.loop.scheduler_load import SchedulerLoad
    from shared.trace.run_log import RunLog
    from shared.trace.trace import Trace
    from shared.workload.workload import Workload
    from sim.routers.base import Router


class FleetRun(NamedTuple):
    traces: list[Trace | RunLog]   # one per replica, in replica order (as its Keep asked)
    replica_of: dict[str, int]     # the router's decision for every request


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
    check_fleet_workload(replicas, workload)
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
    replica_of = {r.rid: checked_route(router, r, router.route(r, view), len(replicas))
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


def check_fleet_workload(replicas: Sequence[Replica], workload: Workload) -> None:
    """`check_workload` for every replica, in order. NOTE: a scheduler's `check_request`
    reads only its config and model info, so a replica equal in both to one checked
    already refuses nothing more: the workload is read once per distinct replica."""
    checked: list[tuple] = []
    for r in replicas:
        key = (r.scheduler.config, r.scheduler.model_info)
        if key not in checked:
            check_workload(r.scheduler, workload)
            checked.append(key)


class _StaticFleet:
    """The view of a router that reads no load: the fleet's size only."""

    def __init__(self, n: int) -> None:
        self.num_replicas = n

    def load(self, replica: int) -> SchedulerLoad:
        raise RuntimeError("this router declared reads_load = False but read a load")
