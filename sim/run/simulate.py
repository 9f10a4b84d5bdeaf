"""`simulate(workload, deployment, layout)`: serve a workload on simulated engines, the one
front door of the simulator.

    simulate(workload, Deployment(model="llama-3-8b", hardware="h100", cost_model="kernel"))
    simulate(workload, deployment, Fleet(4, router="cache_aware"))        # sim.fleet.fleet_layout
    simulate(workload, deployment, Disaggregated(prefill=2, decode=1))    # sim.fleet.disagg_layout

`deployment` (`sim.run.deployment.Deployment`) is one engine instance: model, hardware,
parallelism, dtypes, cost model, engine profile and EngineConfig fields. `layout` says how
many such engines serve the workload and how: `Single()` (the default: one engine, a
`RunResult`), a fleet behind a router or prefill/decode disaggregation (their results,
`sim.fleet`). A layout is any object with `run(workload, deployment, *, seed, slo,
progress, bounds)`.

The convenience form takes the Deployment's fields as flat keywords, as earlier releases
did: `simulate(workload, model="llama-3-8b", tp=2, chunked_prefill_size=4096)` (every
keyword that is not a Deployment field is an EngineConfig field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from shared.trace.run_result import SLO, RunResult
from shared.workload.workload import Workload
from sim.cost.step_bounds import step_bounds
from sim.run.build import build_simulation
from sim.run.deployment import Deployment
from sim.run.driver import drive_workload
from sim.run.token_source import TokenSource


class Layout(Protocol):
    def run(self, workload: Workload, deployment: Deployment, *, seed: int, slo: SLO | None,
            progress: bool, bounds: bool, token_source: TokenSource | None) -> RunResult: ...


@dataclass(frozen=True)
class Single:
    """One engine serving the whole workload; its result is a RunResult."""

    def run(self, workload: Workload, deployment: Deployment, *, seed: int = 0,
            slo: SLO | None = None, progress: bool = False, bounds: bool = True,
            token_source: TokenSource | None = None) -> RunResult:
        s = build_simulation(deployment, seed=seed, token_source=token_source)
        trace = drive_workload(s.scheduler, s.runner, workload,
                               finished_hook=s.token_source.finished, progress=progress)
        steps = step_bounds(s.cost_model, trace, s.runner.overlap) if bounds else None
        return RunResult.from_trace(trace, slo, steps)


def simulate(workload: Workload, deployment: Deployment | None = None, layout: Layout | None = None,
             *, seed: int = 0, slo: SLO | None = None, progress: bool = False,
             bounds: bool = True, token_source: TokenSource | None = None,
             **keywords: Any) -> RunResult:
    """Serve `workload` on `deployment` (or the Deployment of the flat `keywords`) laid out
    as `layout` (None: Single()) and return its RunResult (one part per engine when the
    layout has several).
    `token_source`: None (each engine's SyntheticTokenSource(seed, vocab, eos)) or any
    TokenSource (every engine of the layout draws from it); its `finished` is the driver's
    finished hook.
    `bounds`: fill the steps' `bound` column (each recorded batch re-priced once after the
    run, `sim.cost.step_bounds`); False leaves it "" and saves that pass.
    Raises ValueError for unknown keys, bad parameters or an empty workload, TypeError for an
    unknown engine field, before anything runs."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    if deployment is None:
        deployment = Deployment.from_keywords(**keywords)
    elif keywords:
        raise TypeError(f"give a Deployment or its keywords, not both (got {sorted(keywords)})")
    return (layout or Single()).run(workload, deployment, seed=seed, slo=slo, progress=progress,
                                    bounds=bounds, token_source=token_source)
