"""`SimulatedOnlineEngine`: the simulator as an online engine (`shared.online.online_engine`) — the
spec scheduler and the sim runner on a thread of their own, each step taking its cost-model
time divided by `time_scale` in wall-clock time, so a server in front of it answers as the
simulated GPU would (a mock whose latencies come from the same scheduler and cost model as
`sim.run.simulate`).

The engine's clock is simulated seconds: it advances by each step's price, and while idle
with the wall clock (x time_scale); a request arrives at the engine's time of submission. A
step whose host work outlasts its scaled price lets the clock catch up with the wall (the
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
from shared.online.arrival_buffer import ArrivalBuffer
from shared.online.engine_inbox import Abort, EngineInbox
from shared.online.engine_thread import EngineThread
from shared.online.online_engine import EngineStats, TokenEvent
from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req

if TYPE_CHECKING:
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace
    from sim.run.build import Simulation
    from sim.run.output_lengths import OutputLengths

IDLE_POLL_S = 0.05


class SimulatedOnlineEngine:
    def __init__(self, simulation: Simulation, model_name: str, time_scale: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 output_lengths: OutputLengths | None = None) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
        self._s, self.model_name, self.time_scale, self._clock = simulation, model_name, time_scale, clock
        info = simulation.scheduler.model_info
        self.vocab_size, self.context_length = info.vocab_size, simulation.scheduler.config.context_length
        self._inbox: EngineInbox[tuple[Req, Callable[[TokenEvent], None]]] = EngineInbox()
        self._listeners: dict[str, tuple[Req, Callable[[TokenEvent], None], list[int]]] = {}
        self._loop = EngineThread("sim-engine", self._inbox, self._turn,
                                  lambda e: self._fail_all(f"the engine failed: {e!r}"))
        self._lengths, self._ends = output_lengths, {}   # rid -> its drawn answer length
        self._t0 = 0.0
        self._now = 0.0
        # NOTE: received, not admitted yet: (req, on_event)
        self._arrived = ArrivalBuffer(lambda a: a[0].arrival_time, lambda a: a[0].rid)

    # --- the server's side (any thread) --------------------------------------------------

    def start(self) -> None:
        self._t0 = self._clock()
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def submit(self, rid: str, input_ids: Sequence[int], params: SamplingParams,
               on_event: Callable[[TokenEvent], None]) -> None:
        req = Req(rid, list(input_ids), params, arrival_time=self.wall_now())
        self._s.scheduler.check_request(req)   # NOTE: reads the config only: thread-safe
        self._inbox.submit(rid, on_event, lambda tell: (req, tell))
        self._loop.wake()

    def abort(self, rid: str) -> bool:
        if not self._inbox.abort(rid):
            return False
        self._loop.wake()
        return True

    def stats(self) -> EngineStats:
        sched = self._s.scheduler
        load, cfg = sched.load(), sched.config
        return EngineStats(load.running_requests, load.queued_requests, sched.mem.kv_in_use(),
                           cfg.max_total_tokens, cfg.max_running_requests, cfg.context_length)

    def server_info(self) -> dict:
        return {"mode": "simulate", "served_model_name": self.model_name,
                "time_scale": self.time_scale, **self._s.scheduler.trace.executor,
                **dataclasses.asdict(self._s.scheduler.config)}

    def trace(self) -> Trace:
        """The run's step trace (`sim.run.replay` takes it)."""
        return self._s.scheduler.trace

    def wall_now(self) -> float:
        """The wall clock in simulated seconds since start."""
        return (self._clock() - self._t0) * self.time_scale

    def now(self) -> float:
        """The engine's clock (simulated seconds; `shared.online.online_engine`)."""
        return max(self._now, self.wall_now())

    # --- the engine's thread -----------------------------------------------------------

    def _turn(self) -> bool:
        """Admit, run one step (or wait while idle), send what is new; False once stopping
        and idle."""
        sched = self._s.scheduler
        stopping = self._loop.stopping   # NOTE: read first: then this drain takes every last post
        self._drain_inbox()
        if stopping:
            self._abort_all()
        batch = self._schedule()
        self._emit()
        if batch is not None:
            self._step(batch)
            return True
        if stopping and not sched.has_work() and not self._arrived:
            return False
        self._loop.idle(IDLE_POLL_S)
        self._now = max(self._now, self.wall_now())   # NOTE: idle, the clock follows the wall
        return True

    def _schedule(self):
        """Admit what arrived by `Scheduler.admission_time` and schedule; when that finds
        nothing, the clock catches up with the wall (the simulated GPU idles) and what
        arrived by then is admitted and scheduled (the loop's next turn)."""
        sched = self._s.scheduler
        self._admit_until(sched.admission_time(self._now))
        batch = sched.get_next_batch_to_run(self._now)
        if batch is None:
            self._now = max(self._now, self.wall_now())
            if self._arrived:
                self._admit_until(self._now)
                batch = sched.get_next_batch_to_run(self._now)
        return batch

    def _admit_until(self, t: float) -> None:
        for req, on_event in self._arrived.take_until(t):
            self._admit(req, on_event)

    def _step(self, batch) -> None:
        sched, runner = self._s.scheduler, self._s.runner
        fb = ForwardBatch.init_new(batch)
        out = runner.forward(fb)
        end = self._now + out.duration
        delay = self._t0 + end / self.time_scale - self._clock()
        if delay > 0:
            time.sleep(delay)
        # NOTE: the host's work between steps hides in the next step's price; only where it
        # outlasts the price does the clock fall back to the wall
        self._now = end if delay > 0 else max(end, self.wall_now())
        ids = runner.sample(out, fb)
        if self._ends:
            ids = self._lengths.with_eos(batch.reqs, ids, self._ends)
        sched.process_batch_result(batch, out, ids, end, finished=self._s.token_source.finished(batch, ids))
        self._emit()

    def _drain_inbox(self) -> None:
        for item in self._inbox.take():
            if not isinstance(item, Abort):
                self._arrived.add(item)
                continue
            if item.rid in self._listeners:
                self._s.scheduler.abort(item.rid)
            self._drop_arrived(item.rid, "aborted before it was scheduled")   # NOTE: and its twins

    def _drop_arrived(self, rid: str | None, message: str) -> None:
        """End `rid` (None: every one) among the requests not admitted yet, aborted."""
        for _, on_event in self._arrived.take(rid):
            on_event(TokenEvent((), FinishReason.by_abort(message), 0, self._now))

    def _admit(self, req: Req, on_event: Callable[[TokenEvent], None]) -> None:
        try:
            self._s.scheduler.add_request(req)
        except InvalidRequestError as e:   # NOTE: e.g. its rid is taken; the others go on
            on_event(TokenEvent((), FinishReason.by_abort(str(e)), 0, self._now))
            return
        self._listeners[req.rid] = (req, on_event, [0])
        if self._lengths is not None and not req.sampling_params.ignore_eos:
            self._ends[req.rid] = self._lengths.length(req.rid, req.sampling_params.min_new_tokens)

    def _abort_all(self) -> None:
        self._drop_arrived(None, "the server is shutting down")
        for rid, (req, _, _) in list(self._listeners.items()):
            if not req.finished():
                self._s.scheduler.abort(rid, "the server is shutting down")

    def _fail_all(self, message: str) -> None:
        """Every open request, and every one still in the inbox, ends aborted with `message`."""
        end = FinishReason.by_abort(message)
        self._drop_arrived(None, message)
        for rid, (req, on_event, _) in list(self._listeners.items()):
            on_event(TokenEvent((), end, req.cached_tokens, self._now))
            del self._listeners[rid]
        for item in self._inbox.take():   # NOTE: closed: nothing is posted after this
            if not isinstance(item, Abort):
                _, on_event = item
                on_event(TokenEvent((), end, 0, self._now))

    def _emit(self) -> None:
        """Send each request the tokens it gained since the last event; the finished ones
        their last event."""
        self._s.scheduler.take_finished()
        for rid, (req, on_event, sent) in list(self._listeners.items()):
            new = req.output_ids[sent[0]:]
            done = req.finished()
            if not new and not done:
                continue
            sent[0] += len(new)
            reason: FinishReason | None = req.finished_reason if done else None
            on_event(TokenEvent(tuple(new), reason, req.cached_tokens, self._now))
            if done:
                del self._listeners[rid]
                self._ends.pop(rid, None)
