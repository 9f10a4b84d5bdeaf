"""`simulate_fleet(workload, replicas=N, router=...)`: serve a workload on N identical
simulated engines behind a router (SGLang's `--dp-size N` without attention DP: each
replica its own scheduler, KV cache and radix cache, on its own GPUs; `sim.fleet.driver`).

Every replica is built as `simulate` builds its one engine (`sim.run.simulate.build_simulation`,
the same keywords); the token source is a pure function of (seed, rid), so a request's
tokens do not depend on the replica that serves it. With more than one replica each trace's
executor header records `replica`, `replicas` and `router`.
"""

from __future__ import annotations

from typing import Any

from shared.trace.run_result import SLO
from shared.workload.workload import Workload
from sim.cost.step_bounds import step_bounds
from sim.fleet.driver import Replica, drive_fleet
from sim.fleet.result import FleetResult
from sim.routers import make_router
from sim.routers.base import Router
from sim.run.simulate import build_simulation


def simulate_fleet(workload: Workload, *, replicas: int = 2, router: str | Router | None = None,
                   seed: int = 0, slo: SLO | None = None, progress: bool = False,
                   bounds: bool = True, **simulation_args: Any) -> FleetResult:
    """Serve `workload` on `replicas` engines behind `router` (a `sim.routers.ROUTERS` name,
    None: round_robin, or a Router), seeded by `seed`; `simulation_args`: `simulate`'s
    keywords (model, hardware, tp, engine flags...). ValueError for replicas < 1, an
    unknown router or any bad simulation argument, before anything runs."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be an integer >= 1, got {replicas!r}")
    if not len(workload):
        raise ValueError("the workload has no requests")
    policy = make_router(router, replicas, seed)
    sims = [build_simulation(seed=seed, **simulation_args) for _ in range(replicas)]
    if replicas > 1:
        for i, s in enumerate(sims):
            s.scheduler.trace.executor.update(replica=i, replicas=replicas, router=policy.name)
    run = drive_fleet([Replica(s.scheduler, s.runner, s.token_source.finished) for s in sims],
                      workload, policy, progress=progress)
    steps = [step_bounds(s.cost_model, t, s.runner.overlap) if bounds else None
             for s, t in zip(sims, run.traces, strict=True)]
    return FleetResult.from_run(run, slo, steps)
