"""The SimPy driver: a workload's arrivals and the engine loop, in simulated time (ARCHITECTURE §5).

Two processes share one `simpy.Environment`:

- arrivals: once the engine idles, sleeps until the next arrival time of the workload and
  wakes the engine (a busy engine admits arrivals itself between steps);
- engine: at the top of every iteration admits every request that arrived by
  `Scheduler.admission_time(now)` (now, or under overlap the start of the step still
  unprocessed; `WorkloadRequest.to_req()`, in workload order, as exec's online driver and
  SGLang's `recv_requests` do), then runs the scheduler's driver loop (`Scheduler` docstring):

      batch = scheduler.get_next_batch_to_run(now)
      fb = ForwardBatch.init_new(batch); out = runner.forward(fb)
      yield timeout(step_time); ids = runner.sample(out, fb)
      scheduler.process_batch_result(batch, out, ids, now, finished=finished_hook(batch, ids))

  With nothing to run it waits for the next arrival; it stops when every request finished.

Decode runs (`shared.loop.decode_run`): when the runner can tell the next decode steps' tokens
and prices in advance (`SimModelRunner.decode_run_tokens` / `decode_run_times`) and runs
under its own prices, the steps of an unchanged running batch up to the next event (an
arrival, a possible finish, a KV shortage) are applied to the scheduler at once, and the
engine then sleeps through their durations. The trace and every state are those of the
step-by-step loop (`decode_runs=False`), times included.

A request arriving while step N runs is admitted when it ends (the engine is busy) into step
N + 1, or under the overlap schedule into step N + 2 (SGLang's overlap loop schedules N + 1
as soon as N is launched), unless the scheduling after N finds nothing to run. An idle
engine starts work exactly at an arrival, and a step never starts before the arrival of any
request it holds.

`step_time` is `clock.step_time(BatchShape.from_forward_batch(fb, out.padded_batch_size))`
when a `clock` (any CostModel) is given, else `out.duration`. The runner is any object with
the ModelRunner protocol's `forward`/`sample`: the sim runner, or exec's torch runner run under
a cost-model clock. Nothing here reads a wall clock or draws randomness.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import simpy
from tqdm import tqdm

from shared.batch.forward_batch import ForwardBatch
from shared.loop.admission_turn import admission_turn
from shared.loop.model_runner import ModelRunner, RunnerOutput
from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError
from shared.workload.workload import SortedRequests
from sim.cost.base import CostModel
from sim.cost.batch_shape import BatchShape
from sim.run.arrival_source import ArrivalSource, WorkloadArrivals

if TYPE_CHECKING:
    from shared.batch.schedule_batch import ScheduleBatch
    from shared.loop.scheduler import Scheduler
    from shared.trace.run_log import RunLog
    from shared.trace.trace import Trace
    from shared.workload.workload import Workload, WorkloadRequest

FinishedHook = Callable[["ScheduleBatch", np.ndarray], dict[str, FinishReason]]
PROGRESS_DELAY_S = 2.0
MAX_DECODE_RUN = 256  # steps applied at once at most (bounds the [k, B] token matrix)


def drive_workload(scheduler: Scheduler, runner: ModelRunner, workload: Workload, *,
                   clock: CostModel | None = None, finished_hook: FinishedHook | None = None,
                   progress: bool = False, decode_runs: bool = True) -> Trace | RunLog:
    """Serve `workload` on `scheduler` with `runner` in simulated time (seconds from 0) until
    every request finished; returns the scheduler's trace (its RunLog under Keep(trace=False)).
    `finished_hook(batch, ids)` names requests to end after this step's token (the
    `finished=` map of process_batch_result).
    `decode_runs` allows bulk decode runs where the runner supports them (module doc).
    Raises ValueError for an empty workload, InvalidRequestError (naming the request, before
    anything runs) for one the scheduler could never serve, RuntimeError if it stalls."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    check_workload(scheduler, workload)
    env = simpy.Environment()
    with cyclic_gc_paused(), tqdm(total=len(workload), desc="simulate", unit="req",
                                  delay=PROGRESS_DELAY_S, disable=not progress) as bar:
        source = WorkloadArrivals(workload.requests, workload.followups)
        loop = EngineLoop(env, scheduler, runner, source, clock, finished_hook, bar)
        if workload.followups:
            loop.on_finished = lambda done: source.finished(done, scheduler.trace.requests,
                                                            scheduler.check_request)
        loop.decode_runs = decode_runs and supports_decode_runs(runner, clock, finished_hook)
        arrivals = loop.arrivals()
        env.process(arrivals)
        env.run(until=env.process(loop.engine()))
        arrivals.close()  # NOTE: its frame, waiting for the next idle, holds the loop in a cycle
    check_all_finished(workload, [scheduler.trace])
    return scheduler.trace


def check_workload(scheduler: Scheduler, workload: Workload) -> None:
    """Refuse the workload if the scheduler would refuse any of its requests at arrival,
    naming the first such request (so a run never stops half-way on bad input). Requests
    with stand-ins (`SortedRequests.stand_ins`: a generated workload's) are read one by one
    only when the scheduler refuses a stand-in."""
    stand_ins = workload.requests.stand_ins() if isinstance(workload.requests, SortedRequests) else None
    if stand_ins is not None and not any(refuses(scheduler, r) for r in stand_ins):
        return
    for r in workload:
        try:
            scheduler.check_request(r.to_req())
        except InvalidRequestError as e:
            raise InvalidRequestError(e.field, e.value, f"request {r.rid!r}: {e.reason}") from None


def refuses(scheduler: Scheduler, r: WorkloadRequest) -> bool:
    """Whether the scheduler would refuse `r` at arrival."""
    try:
        scheduler.check_request(r.to_req())
    except InvalidRequestError:
        return True
    return False


class EngineLoop:
    """One engine's process and the state the arrival process shares with it: where its
    requests come from (`sim.run.arrival_source`) and the idle event."""

    def __init__(self, env: simpy.Environment, scheduler: Scheduler, runner: ModelRunner,
                 source: ArrivalSource, clock: CostModel | None,
                 finished_hook: FinishedHook | None, progress: tqdm | None = None) -> None:
        self.env, self.scheduler, self.runner = env, scheduler, runner
        self.source = source
        self.clock, self.finished_hook = clock, finished_hook
        self.idle: simpy.Event | None = None    # set while the engine waits for an arrival
        self.went_idle = env.event()            # the engine tells the arrival process
        self.progress = progress                # a tqdm bar counting finished requests
        self.decode_runs = False                # apply decode runs (supports_decode_runs)
        self.on_finished: Callable[[list], None] | None = None  # told of finished Reqs

    def arrivals(self) -> Iterator[simpy.Event]:
        """Wake the idle engine at the next arrival. NOTE: while the engine works it admits
        arrivals itself at the end of each step, so this process sleeps until the engine
        idles, then until the next arrival time."""
        env = self.env
        while True:
            yield self.went_idle
            self.went_idle = env.event()
            yield from wait_until(env, self.source.next_arrival())
            self.wake()

    def wake(self) -> None:
        """Let the engine, if it waits for an arrival, look for work again."""
        if self.idle is not None and not self.idle.triggered:
            self.idle.succeed()

    def engine(self) -> Iterator[simpy.Event]:
        sched, batch, scheduled = self.scheduler, None, False
        while True:
            if not scheduled:  # else decode runs scheduled `batch` at this time already
                batch = self.schedule()
            scheduled = False
            if batch is not None and self.decode_runs and batch.forward_mode.is_decode():
                batch, scheduled = yield from self.decode_runs_from(batch)
            elif batch is not None:
                yield from self.step(batch)
            elif self.source.next_arrival() < math.inf:
                self.idle = self.env.event()
                if not self.went_idle.triggered:   # NOTE: a fleet's replica has no waiter
                    self.went_idle.succeed()
                yield self.idle
                self.idle = None
            elif sched.has_work():
                raise RuntimeError(f"the scheduler stalled at t={self.env.now:.6f} s with "
                                   f"{len(sched.waiting_queue)} request(s) waiting")
            else:
                self.count_finished(sched.take_finished())
                return

    def schedule(self) -> ScheduleBatch | None:
        """Admit and schedule at now; when that finds nothing while requests that arrived
        during the last step wait (overlap: `Scheduler.admission_time`), admit them and
        schedule again, as the loop's next turn would (`shared.loop.admission_turn`)."""
        now = self.env.now
        return admission_turn(now, self.scheduler.admission_time, self.admit_until,
                              self.schedule_at, lambda: now)

    def admit_until(self, t: float) -> bool:
        """Add what arrived by `t`; whether anything came."""
        due = self.source.due(t)
        for r in due:
            self.scheduler.add_request(r.to_req())
        return bool(due)

    def schedule_at(self, now: float) -> ScheduleBatch | None:
        batch = self.scheduler.get_next_batch_to_run(now)
        # NOTE: under overlap the last step's finishes are processed here
        self.count_finished(self.scheduler.take_finished())
        return batch

    def step(self, batch: ScheduleBatch) -> Iterator[simpy.Event]:
        fb = ForwardBatch.init_new(batch)
        out = self.runner.forward(fb)
        yield self.env.timeout(self.step_time(fb, out))
        self.process(batch, out, self.runner.sample(out, fb))

    def process(self, batch: ScheduleBatch, out: RunnerOutput, ids: np.ndarray) -> None:
        finished = self.finished_hook(batch, ids) if self.finished_hook is not None else None
        self.count_finished(self.scheduler.process_batch_result(batch, out, ids, self.env.now, finished))

    def count_finished(self, done: list) -> None:
        if done and self.on_finished is not None:
            self.on_finished(done)
        if done and self.progress is not None:
            self.progress.update(len(done))

    def decode_runs_from(self, batch: ScheduleBatch
                         ) -> Generator[simpy.Event, None, tuple[ScheduleBatch | None, bool]]:
        """Decode runs from the scheduled decode step `batch` on, one after the other while no
        request arrives (each run's end is a scheduling point at which the engine would admit
        nothing: the next batch is scheduled there directly), then sleep through them.
        Returns (batch, True) when the last scheduling point gave a batch that is not a
        decode run's (None included), for the engine to serve; else (None, False)."""
        t = self.env.now
        while True:
            end = self.decode_run(batch, t)
            if end is None:  # the token source ends a request in the first step
                if t != self.env.now:
                    yield from self.sleep_until(t)
                yield from self.step(batch)
                return None, False
            t = end
            if self.source.next_arrival() <= self.scheduler.admission_time(t):
                break
            batch = self.scheduler.get_next_batch_to_run(t)
            if batch is None or not batch.forward_mode.is_decode():
                yield from self.sleep_until(t)
                # NOTE: overlap: requests that arrived during the run's last step come next
                return batch, batch is not None or self.source.next_arrival() > t
        yield from self.sleep_until(t)
        return None, False

    def decode_run(self, batch: ScheduleBatch, t: float) -> float | None:
        """Apply the scheduled decode step `batch` (starting at time t) and the unchanged
        steps after it up to the next event (an arrival, or a step that may finish a
        request, whose result is processed with the run) on looked-ahead tokens and prices.
        Returns the run's end time, or None (having changed nothing) when the token source
        ends a request in the first step (the step-by-step path runs it)."""
        sched, runner = self.scheduler, self.runner
        limit = sched.decode_run_limit(MAX_DECODE_RUN)
        times = runner.decode_run_times(batch.seq_lens, limit.steps)
        starts = self.run_starts(times.durations, t)            # cut at the next arrival
        tokens = runner.decode_run_tokens(batch.rids, limit.output_lens,
                                          len(starts) - 1)      # [k, B]
        if len(tokens) == 0:
            return None
        f = sched.decode_run_steps_before_finish(tokens, limit.length_limit_step)
        # NOTE: step f, if in the run, may finish a request: the run ends with it, or under
        # overlap with the step after it (scheduled before f's result is processed)
        m = min(f + 1 + sched.config.overlap, len(tokens))
        # NOTE: the run's results are in at its start; the hook is not asked, as the token
        # source's `finished` cannot end a request inside a run (steps_before_end cut it).
        self.count_finished(sched.apply_decode_run(tokens[:m], starts, times.graph,
                                                   times.padded_batch_size,
                                                   finish_step=f if f < len(tokens) else None))
        return starts[m]

    def sleep_until(self, t: float) -> Iterator[simpy.Event]:
        for d in delays_to(self.env.now, t):
            yield self.env.timeout(d)

    def run_starts(self, durations: Iterable[float], t: float) -> list[float]:
        """Start times, from t, of the run's steps plus the end of the last: step j > 0 runs
        only if no request arrives by its start, under overlap by step j - 1's start (it
        would be admitted: `Scheduler.admission_time`)."""
        nxt, lag = self.source.next_arrival(), 1 + self.scheduler.config.overlap
        starts = [t]
        for d in durations:
            if len(starts) > 1 and starts[-lag] >= nxt:
                break
            if not 0.0 <= d < math.inf:  # NOTE: check_step_time, inlined (NaN fails too)
                check_step_time(d)
            starts.append(starts[-1] + d)
        return starts

    def step_time(self, fb: ForwardBatch, out: RunnerOutput) -> float:
        if self.clock is not None:
            t = self.clock.step_time(BatchShape.from_forward_batch(fb, out.padded_batch_size),
                                     self.scheduler.config.overlap)
        elif out.duration is None:
            raise ValueError("the runner reported no step duration (RunnerOutput.duration is "
                             "None); give the driver a cost model as its clock")
        else:
            t = out.duration
        return check_step_time(t)



@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a run; its previous state comes back after.

    NOTE: a run builds many long-lived objects (trace records, cache nodes, requests) and no
    reference cycles (tests/test_sim_driver.py checks a whole simulation), so the collector
    would only rescan live objects: about 10% of the benchmark's time. Garbage is still freed
    at once by reference counting. At the end the run's objects join the oldest generation
    (scanned at the next full collection), not the youngest."""
    was_enabled, caller_froze = gc.isenabled(), gc.get_freeze_count() > 0
    gc.disable()
    try:
        yield
    finally:
        if not caller_froze:  # NOTE: unfreeze would also thaw what the caller froze
            gc.freeze()    # the run's objects go to the oldest generation unscanned, and the
            gc.unfreeze()  # allocation count restarts at 0 (else the next allocation scans them)
        if was_enabled:
            gc.enable()


def check_all_finished(workload: Workload, traces: Sequence[Trace | RunLog]) -> None:
    """RuntimeError naming requests that no trace records as finished, or counting the
    workload's requests no trace recorded at all (a follow-up turn counts once sent: its
    conversation may have ended before it)."""
    left = [rid for t in traces for rid in t.unfinished()]
    if left:
        raise RuntimeError(f"{len(left)} request(s) never finished: {left[:5]}")
    recorded = sum(len(t.requests) for t in traces)
    if recorded < len(workload.requests):
        raise RuntimeError(f"{len(workload.requests) - recorded} request(s) of the workload "
                           f"were never served")


def check_step_time(t: float) -> float:
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"step time must be finite and >= 0 seconds, got {t!r}")
    return t


def delays_to(now: float, target: float) -> list[float]:
    """One or two delays that take SimPy's clock (which adds each to now) from `now` to
    exactly `target` >= now >= 0. NOTE: for target / 2 <= t <= target, target - t is exact
    (Sterbenz), so t + (target - t) == target; from further back, a first hop lands there
    (a single delay can miss: now + d may round past target either way)."""
    if now >= target / 2:
        return [target - now]
    first = 0.75 * target - now
    return [first, target - (now + first)]


def wait_until(env: simpy.Environment, t: float) -> Iterator[simpy.Event]:
    """Sleep until SimPy's clock reads exactly `t` (`delays_to`); no event at all when t is
    not later than now (what arrived by now is due already). NOTE: every process that sleeps
    to an absolute time (an arrival) sleeps through this, so a workload's arrival is the
    same float however far back the sleep started: a single engine sleeps from when it
    went idle, a fleet's router from the previous arrival or the reply a follow-up waits for
    (one `timeout(t - now)` can land a ulp either side of t)."""
    now = env.now
    if now < t:
        for d in delays_to(now, t):
            yield env.timeout(d)


def supports_decode_runs(runner: ModelRunner, clock: CostModel | None,
                         finished_hook: FinishedHook | None) -> bool:
    """Decode runs need the runner's own prices (no separate clock), a runner that can look
    ahead, and no finished hook other than its token source's (which the look-ahead sees)."""
    source = getattr(runner, "token_source", None)
    return (clock is None and hasattr(runner, "decode_run_tokens")
            and (finished_hook is None or getattr(finished_hook, "__self__", None) is source))
