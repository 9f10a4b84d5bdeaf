"""Online runs: serve a `shared.Workload` with requests arriving in wall-clock time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from shared.loop.admission_turn import admission_turn
from shared.trace.run_result import RunResult
from shared.workload.workload import Workload

MAX_IDLE_SLEEP_S = 0.05


class Engine(Protocol):
    """What an online run uses of `exec.engine.engine.Engine` (which calls it: `Engine.run`)."""

    trace: Any

    def now(self) -> float: ...
    def make_requests(self, prompts: list, params: list, **kwargs: Any) -> list: ...
    def forget(self, req: Any) -> None: ...
    def serve(self, loop: Callable[[], object]) -> None: ...
    def add_request(self, req: Any) -> None: ...
    def admission_time(self, now: float) -> float: ...
    def take_finished(self) -> list: ...
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
    """Admit and step until every request of `reqs` finished (`shared.loop.admission_turn`),
    as `Engine.serve` runs a loop. A request whose forward or sampling raises ends aborted
    with the error (Engine.step) and the run goes on; a stream dropped meanwhile is aborted
    at the next step."""
    pending = Pending(sorted(reqs, key=lambda r: r.arrival_time), engine)
    open_rids = {r.rid for r in reqs}

    def step(now: float) -> object | None:
        ran = engine.step(now)
        # NOTE: overlap: a poll that found no batch processed the last step's result
        open_rids.difference_update(r.rid for r in (ran.finished if ran is not None else engine.take_finished()))
        return ran

    def loop() -> None:
        while open_rids:
            ran = admission_turn(engine.now(), engine.admission_time, pending.admit_until, step,
                                 engine.now)
            if ran is not None or not open_rids:
                continue
            if not pending:
                raise RuntimeError(f"scheduler stopped with {len(open_rids)} request(s) unfinished")
            time.sleep(min(max(pending.next_arrival() - engine.now(), 0.0), MAX_IDLE_SLEEP_S))

    engine.serve(loop)


class Pending:
    """The requests of a run not admitted yet, in arrival order."""

    def __init__(self, reqs: list, engine: Engine) -> None:
        self._reqs, self._next, self._engine = reqs, 0, engine

    def __bool__(self) -> bool:
        return self._next < len(self._reqs)

    def next_arrival(self) -> float:
        return self._reqs[self._next].arrival_time

    def admit_until(self, t: float) -> bool:
        """Add the requests that arrived by `t`; whether any did."""
        first = self._next
        while self and self.next_arrival() <= t:
            self._engine.add_request(self._reqs[self._next])
            self._next += 1
        return self._next > first
