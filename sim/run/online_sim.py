"""`SimStepper`: the simulator under a `ServingLoop` (`shared.online.stepper`): the spec
scheduler and the sim runner, each step taking its cost-model time divided by `time_scale`
in wall-clock time, so a server in front of it answers as the simulated GPU would (a mock
whose latencies come from the same scheduler and cost model as `sim.run.simulate`).

    online = ServingLoop(SimStepper(build_simulation(model="llama-3-8b"), "m", time_scale=10))

The engine's clock is simulated seconds: it advances by each step's price, and while idle
with the wall clock (x time_scale); a request arrives at the wall clock's time of submission.
A step whose host work outlasts its scaled price lets the clock catch up with the wall (the
host cannot run faster than itself). Tokens come from the simulation's token source (a pure
function of (seed, rid)); requests end at their max_new_tokens or an abort, or with
`output_lengths` (`sim.run.output_lengths`) at a length drawn per request, with the EOS.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shared.batch.forward_batch import ForwardBatch
from shared.online.online_engine import EngineStats, TokenEvent
from shared.request.req import Req

if TYPE_CHECKING:
    from shared.batch.schedule_batch import ScheduleBatch
    from shared.online.stepper import Submitted
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace
    from sim.run.build import Simulation
    from sim.run.output_lengths import OutputLengths


class SimStepper:
    thread_name = "sim-engine"

    def __init__(self, simulation: Simulation, model_name: str, time_scale: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 output_lengths: OutputLengths | None = None) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
        self._sched, self._runner, self._tokens = simulation.scheduler, simulation.runner, simulation.token_source
        self.model_name, self.time_scale, self._clock = model_name, time_scale, clock
        self.vocab_size, self.context_length = self._sched.model_info.vocab_size, self._sched.config.context_length
        self._lengths, self._ends = output_lengths, {}   # rid -> its drawn answer length
        self._sent: dict[str, int] = {}                  # rid -> its output tokens told
        self._t0 = self._now = 0.0

    def check(self, input_ids: Sequence[int], params: SamplingParams) -> None:
        self._sched.check_request(Req("", list(input_ids), params))   # NOTE: reads the config only

    def arrival_time(self) -> float:
        """The wall clock in simulated seconds since start."""
        return (self._clock() - self._t0) * self.time_scale

    def now(self) -> float:
        return max(self._now, self.arrival_time())

    def header(self) -> dict:
        return {"mode": "simulate", "served_model_name": self.model_name, "time_scale": self.time_scale,
                **self._sched.trace.executor, **dataclasses.asdict(self._sched.config)}

    def trace(self) -> Trace:
        """The run's step trace (`sim.run.replay` takes it)."""
        return self._sched.trace

    def start(self) -> None:
        self._t0 = self._clock()

    def time(self) -> float:
        return self._now

    def catch_up(self) -> float:
        self._now = max(self._now, self.arrival_time())   # NOTE: the simulated GPU idled
        return self._now

    def admission_time(self, now: float) -> float:
        return self._sched.admission_time(now)

    def admit(self, s: Submitted) -> Req:
        req = Req(s.rid, s.input_ids, s.params, arrival_time=s.arrival)
        self._sched.add_request(req)
        self._sent[req.rid] = 0
        if self._lengths is not None and not req.sampling_params.ignore_eos:
            self._ends[req.rid] = self._lengths.length(req.rid, req.sampling_params.min_new_tokens)
        return req

    def step(self, now: float, on_processed: Callable[[], None]) -> ForwardBatch | None:
        batch = self._sched.get_next_batch_to_run(now)
        self._sched.take_finished()   # NOTE: the loop tells requests from their state
        if batch is None:
            return None
        on_processed()
        return self._run(batch)

    def _run(self, batch: ScheduleBatch) -> ForwardBatch:
        fb = ForwardBatch.init_new(batch)
        out = self._runner.forward(fb)
        end = self._now + out.duration
        delay = self._t0 + end / self.time_scale - self._clock()
        if delay > 0:
            time.sleep(delay)
        # NOTE: the host's work between steps hides in the next step's price; only where it
        # outlasts the price does the clock fall back to the wall
        self._now = end if delay > 0 else max(end, self.arrival_time())
        ids = self._runner.sample(out, fb)
        if self._ends:
            ids = self._lengths.with_eos(batch.reqs, ids, self._ends)
        self._sched.process_batch_result(batch, out, ids, end, finished=self._tokens.finished(batch, ids))
        return fb

    def abort(self, rid: str, message: str = "aborted by the client") -> bool:
        return self._sched.abort(rid, message)

    def increment(self, req: Req) -> TokenEvent | None:
        new, done = req.output_ids[self._sent[req.rid]:], req.finished()
        if not new and not done:
            return None
        self._sent[req.rid] += len(new)
        return TokenEvent(tuple(new), req.finished_reason if done else None, req.cached_tokens, self._now)

    def forget(self, req: Req) -> None:
        del self._sent[req.rid]
        self._ends.pop(req.rid, None)

    def quiesce(self) -> bool:
        return not self._sched.has_work()

    def stats(self) -> EngineStats:
        return EngineStats.of(self._sched)
