"""`Fleet(replicas, router)`: a layout of N identical simulated engines behind a router
(SGLang's `--dp-size N` without attention DP: each replica its own scheduler, KV cache and
radix cache, on its own GPUs; `sim.fleet.driver`), for `simulate(workload, deployment,
Fleet(4, "cache_aware"))`.

Every replica is built from the same Deployment (`sim.run.build.build_simulation`); the token
source is a pure function of (seed, rid), so a request's tokens do not depend on the replica
that serves it. With more than one replica each trace's executor header records `replica`,
`replicas` and `router`. Each replica keeps what the run's `Keep` asks (a lean fleet: a
`RunLog` per replica, read by `sim.fleet.result` into the full-trace fleet's numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from shared.trace.run_log import FULL_TRACE, Keep
from shared.trace.run_result import SLO, RunResult
from shared.workload.workload import Workload
from sim.cost.step_bounds import step_bounds
from sim.fleet.driver import Replica, drive_fleet
from sim.fleet.result import fleet_result
from sim.routers import make_router
from sim.routers.base import Router
from sim.run.build import build_simulation
from sim.run.deployment import Deployment
from sim.run.token_source import TokenSource


@dataclass(frozen=True)
class Fleet:
    """`replicas` engines behind `router` (a `sim.routers.ROUTERS` name, None: round_robin,
    or a Router). ValueError for replicas < 1 or an unknown router, before anything runs."""

    replicas: int = 2
    router: str | Router | None = None

    def __post_init__(self) -> None:
        n = self.replicas
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"replicas must be an integer >= 1, got {n!r}")

    def run(self, workload: Workload, deployment: Deployment, *, seed: int = 0,
            slo: SLO | None = None, progress: bool = False, bounds: bool = True,
            token_source: TokenSource | None = None, keep: Keep = FULL_TRACE) -> RunResult:
        """Serve `workload` on the replicas, seeded by `seed`, each keeping what `keep` says
        (its `trace_file`: one file per replica, `replica_trace_file`)."""
        n = self.replicas
        policy = make_router(self.router, n, seed)
        extra = (lambda i: {"replica": i, "replicas": n, "router": policy.name}) if n > 1 \
            else (lambda i: None)
        keeps = [replace(keep, trace_file=replica_trace_file(keep.trace_file, i))
                 for i in range(n)]
        sims = [build_simulation(deployment, seed=seed, token_source=token_source,
                                 header_extra=extra(i), keep=keeps[i], bounds=bounds)
                for i in range(n)]
        run = drive_fleet([Replica(s.scheduler, s.runner, s.token_source.finished) for s in sims],
                          workload, policy, progress=progress)
        if not keep.trace:
            return fleet_result(run, slo)
        steps = [step_bounds(s.cost_model, t, s.runner.overlap) if bounds else None
                 for s, t in zip(sims, run.traces, strict=True)]
        for k, t in zip(keeps, run.traces, strict=True):
            if k.trace_file is not None:
                t.save(k.trace_file)
        return fleet_result(run, slo, steps)


def replica_trace_file(path: str | Path | None, i: int) -> Path | None:
    """Replica `i`'s trace file for a fleet's `path` (None: none): "trace.jsonl" ->
    "trace-{i}.jsonl", beside it."""
    if path is None:
        return None
    path = Path(path)
    return path.with_name(f"{path.stem}-{i}{path.suffix}")
