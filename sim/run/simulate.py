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
from pathlib import Path
from typing import Any, Protocol

from shared.trace.log_result import result_from_log
from shared.trace.run_log import FULL_TRACE, Keep
from shared.trace.run_result import SLO, RunResult
from shared.workload.workload import Workload
from sim.cost.step_bounds import step_bounds
from sim.run.build import build_simulation
from sim.run.deployment import Deployment
from sim.run.driver import drive_workload
from sim.run.token_source import TokenSource


class Layout(Protocol):
    def run(self, workload: Workload, deployment: Deployment, *, seed: int, slo: SLO | None,
            progress: bool, bounds: bool, token_source: TokenSource | None,
            keep: Keep) -> RunResult: ...


@dataclass(frozen=True)
class Single:
    """One engine serving the whole workload; its result is a RunResult."""

    def run(self, workload: Workload, deployment: Deployment, *, seed: int = 0,
            slo: SLO | None = None, progress: bool = False, bounds: bool = True,
            token_source: TokenSource | None = None, keep: Keep = FULL_TRACE) -> RunResult:
        s = build_simulation(deployment, seed=seed, token_source=token_source,
                             keep=keep, bounds=bounds)
        log = drive_workload(s.scheduler, s.runner, workload,
                             finished_hook=s.token_source.finished, progress=progress)
        if not keep.trace:
            return result_from_log(log, slo)
        steps = step_bounds(s.cost_model, log, s.runner.overlap) if bounds else None
        if keep.trace_file is not None:
            log.save(keep.trace_file)
        return RunResult.from_trace(log, slo, steps)


def simulate(workload: Workload, deployment: Deployment | None = None, layout: Layout | None = None,
             *, seed: int = 0, slo: SLO | None = None, progress: bool = False,
             bounds: bool = True, token_source: TokenSource | None = None,
             keep_trace: bool = False, keep_steps: bool = False,
             save_trace: str | Path | None = None, **keywords: Any) -> RunResult:
    """Serve `workload` on `deployment` (or the Deployment of the flat `keywords`) laid out
    as `layout` (None: Single()) and return its RunResult (one part per engine when the
    layout has several).
    `token_source`: None (each engine's SyntheticTokenSource(seed, vocab, eos)) or any
    TokenSource (every engine of the layout draws from it); its `finished` is the driver's
    finished hook.
    `bounds`: fill the steps' `bound` column (each recorded batch re-priced once,
    `sim.cost.step_bounds`); False leaves it "" and saves that pass.
    What the result keeps: by default the requests table and the summary, in memory that does
    not grow with the steps run (`shared.trace.run_log`: `trace` None, `steps` empty);
    `keep_steps` adds the `.steps` table (about 60 bytes a step); `keep_trace` keeps the
    whole Trace (every step's record and every request's token ids: replayable, what
    `--save-trace` writes), a fleet one per replica; disaggregated layouts keep every engine's
    trace.
    `save_trace`: a file the one engine's trace is written to as the run goes (`Trace.save`'s
    format; `shared.trace.trace_writer`), without holding it in memory.
    Raises ValueError for unknown keys, bad parameters or an empty workload, TypeError for an
    unknown engine field, before anything runs."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    if deployment is None:
        deployment = Deployment.from_keywords(**keywords)
    elif keywords:
        raise TypeError(f"give a Deployment or its keywords, not both (got {sorted(keywords)})")
    if save_trace is not None and not isinstance(layout or Single(), Single):
        raise ValueError("save_trace writes one engine's trace; a fleet's or a disaggregated "
                         "run's traces are result.traces (keep_trace=True is implied)")
    keep = Keep(trace=keep_trace, steps=keep_steps, trace_file=save_trace)
    return (layout or Single()).run(workload, deployment, seed=seed, slo=slo, progress=progress,
                                    bounds=bounds, token_source=token_source, keep=keep)
