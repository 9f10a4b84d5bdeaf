"""Online runs: serve a `shared.Workload` with requests arriving in wall-clock time."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

from shared.trace.run_result import RunResult
from shared.workload.workload import Workload

MAX_IDLE_SLEEP_S = 0.05


class Engine(Protocol):
    """What an online run uses of `exec.engine.engine.Engine` (which calls it: `Engine.run`)."""

    scheduler: Any
    trace: Any

    def now(self) -> float: ...
    def make_requests(self, prompts: list, params: list, **kwargs: Any) -> list: ...
    def forget(self, req: Any) -> None: ...
    def busy(self) -> AbstractContextManager[None]: ...
    def drain(self) -> None: ...
    def step(self, now: float | None = None) -> Any: ...


def run_workload(engine: Engine, workload: Workload) -> RunResult:
    """Admit each request at its arrival time (seconds after the call), step the scheduler
    while anything is waiting or running, and return the run's `RunResult`, whose trace
    holds this run's requests and steps, times in seconds from the call (arrivals as the
    workload's)."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    if workload.followups:
        raise ValueError("follow-up turns (`Sessions`) are run by the simulator only "
                         "(sim.run.simulate); the real executor's online run takes open-loop "
                         "workloads")
    taken = [w.rid for w in workload if w.rid in engine.trace.requests]
    if taken:
        raise ValueError(f"request ids already served by this engine: {taken[:5]}; "
                         "use a fresh Engine or different rids")
    start, first_step = engine.now(), len(engine.trace)
    reqs = engine.make_requests([list(w.input_ids) for w in workload],
                                [w.sampling_params for w in workload],
                                rids=[w.rid for w in workload],
                                arrivals=[start + w.arrival_time for w in workload])
    _serve(engine, reqs)
    for r in reqs:
        engine.forget(r)
    return RunResult.from_trace(engine.trace.select([r.rid for r in reqs], first_step, t0=start))


def _serve(engine: Engine, reqs: list) -> None:
    """Admit and step until every request of `reqs` finished. A request whose forward or
    sampling raises ends aborted with the error (Engine.step) and the run goes on; a
    stream dropped meanwhile is aborted at the next step (Engine.busy)."""
    with engine.busy():
        _serve_loop(engine, reqs)
    engine.drain()
    if engine.scheduler.is_idle():
        engine.step()  # idle poll: leak check and new_token_ratio reset, as after generate()


def _serve_loop(engine: Engine, reqs: list) -> None:
    pending, i, open_rids = sorted(reqs, key=lambda r: r.arrival_time), 0, {r.rid for r in reqs}
    while open_rids:
        now = engine.now()
        # NOTE: under overlap, what arrived by the start of the step still unprocessed
        cutoff = engine.scheduler.admission_time(now)
        while i < len(pending) and pending[i].arrival_time <= cutoff:
            engine.scheduler.add_request(pending[i])
            i += 1
        step = engine.step(now)
        # NOTE: overlap: a poll that found no batch processed the last step's result
        open_rids -= {r.rid for r in (step[1] if step is not None else engine.scheduler.take_finished())}
        if step is not None or not open_rids:
            continue
        if i < len(pending) and pending[i].arrival_time <= now:
            continue   # NOTE: arrived while the last step ran: the next turn admits it
        if i < len(pending):
            time.sleep(min(max(pending[i].arrival_time - engine.now(), 0.0), MAX_IDLE_SLEEP_S))
        else:
            raise RuntimeError(f"scheduler stopped with {len(open_rids)} request(s) unfinished")
