"""`ExecOnlineEngine`: the real executor as an online engine (`shared.online.online_engine`): an
`exec.Engine` stepped on a thread of its own beside the server's event loop, so that no
request blocks another and the server never waits on a forward.

Only the engine's thread touches the Engine. The server's threads validate (`submit` reads
the config only) and post to the inbox (`shared.online.engine_inbox`); the thread admits what
arrived before each step, steps, and sends every request its new tokens and text (the
Engine's detokenizer: stop strings cut, no partial character) with their logprobs when
asked for, as soon as a step's result is processed (under the overlap schedule, while the
next forward runs, as SGLang streams while the GPU runs the next batch). `stop()` aborts what
is in flight, steps until the scheduler is idle (its idle check: no leaked KV slot or
request row) and joins the thread; an error that killed the thread is raised there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from shared.online.arrival_buffer import ArrivalBuffer
from shared.online.engine_inbox import Abort, EngineInbox
from shared.online.engine_thread import EngineThread
from shared.online.online_engine import EngineStats, TokenEvent
from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError

if TYPE_CHECKING:
    from exec.engine.engine import Engine
    from shared.request.req import Req
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace

IDLE_POLL_S = 0.05
SHUTDOWN = "the server is shutting down"


class Listener(NamedTuple):
    req: Req
    on_event: Callable[[TokenEvent], None]


class Submitted(NamedTuple):
    rid: str
    input_ids: list[int]
    params: SamplingParams
    arrival: float
    on_event: Callable[[TokenEvent], None]


class ExecOnlineEngine:
    def __init__(self, engine: Engine, model_name: str, model_path: str | None = None) -> None:
        self._e, self.model_name, self._model_path = engine, model_name, model_path
        self.vocab_size = engine.model_info.vocab_size
        self.context_length = engine.scheduler.config.context_length
        self._inbox: EngineInbox[Submitted] = EngineInbox()
        self._listeners: dict[str, Listener] = {}
        self._arrived = ArrivalBuffer(lambda s: s.arrival, lambda s: s.rid)   # not admitted yet
        self._loop = EngineThread("exec-engine", self._inbox, self._turn,
                                  lambda e: self._fail_all(f"the engine failed: {e!r}"))
        self._stats = self._snapshot()

    # --- the server's side (any thread) --------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def submit(self, rid: str, input_ids: Sequence[int], params: SamplingParams,
               on_event: Callable[[TokenEvent], None]) -> None:
        self._e.check_request(input_ids, params)
        ids = list(input_ids)
        self._inbox.submit(rid, on_event,
                           lambda tell: Submitted(rid, ids, params, self._e.now(), tell))
        self._loop.wake()

    def abort(self, rid: str) -> bool:
        if not self._inbox.abort(rid):
            return False
        self._loop.wake()
        return True

    def stats(self) -> EngineStats:
        return self._stats   # NOTE: published by the engine's thread after each turn

    def now(self) -> float:
        return self._e.now()

    def server_info(self) -> dict:
        cfg = self._e.scheduler.config
        return {"mode": "exec", "model_path": self._model_path, "served_model_name": self.model_name,
                **self._e.trace.executor, **dataclasses.asdict(cfg)}

    def trace(self) -> Trace:
        return self._e.trace

    # --- the engine's thread -----------------------------------------------------------

    def _turn(self) -> bool:
        """Admit, step once, send what is new; False once stopping and idle."""
        stopping = self._loop.stopping   # NOTE: read first: then this drain takes every last post
        self._drain_inbox()
        if stopping:
            self._abort_all()
        now = self._e.now()
        self._admit_until(self._e.scheduler.admission_time(now))
        step = self._e.step(now, on_processed=self._emit)
        if step is None:   # NOTE: overlap: this poll processed the last step's result
            self._e.scheduler.take_finished()
        self._emit()
        self._stats = self._snapshot()
        if step is not None or self._arrived:   # NOTE: the next turn admits them at once
            self._admit_until(now)
            return True
        if stopping and self._e.scheduler.is_idle():
            self._e.drain()
            return False
        self._loop.idle(IDLE_POLL_S)
        return True

    def _drain_inbox(self) -> None:
        for item in self._inbox.take():
            if not isinstance(item, Abort):
                self._arrived.add(item)
                continue
            if item.rid in self._listeners:
                self._e.scheduler.abort(item.rid)
            self._drop_arrived(item.rid, "aborted before it was scheduled")   # NOTE: and its twins

    def _admit_until(self, t: float) -> None:
        """Admit the drained requests that arrived by `t` (`Scheduler.admission_time`)."""
        for s in self._arrived.take_until(t):
            self._admit(s)

    def _drop_arrived(self, rid: str | None, message: str) -> None:
        """End `rid` (None: every one) among the drained requests not admitted, aborted."""
        for s in self._arrived.take(rid):
            s.on_event(TokenEvent((), FinishReason.by_abort(message), 0, self._e.now()))

    def _admit(self, s: Submitted) -> None:
        try:
            req = self._e.make_requests([s.input_ids], [s.params], rids=[s.rid], arrivals=[s.arrival])[0]
            self._e.scheduler.add_request(req)
        except InvalidRequestError as e:   # NOTE: e.g. its rid is taken; the others go on
            s.on_event(TokenEvent((), FinishReason.by_abort(str(e)), 0, self._e.now()))
            return
        self._listeners[s.rid] = Listener(req, s.on_event)

    def _abort_all(self) -> None:
        self._drop_arrived(None, SHUTDOWN)
        for listener in self._listeners.values():
            if not listener.req.finished():
                self._e.scheduler.abort(listener.req.rid, SHUTDOWN)

    def _emit(self) -> None:
        for rid, (req, on_event) in list(self._listeners.items()):
            chunk = self._e.increment(req)
            if chunk is None:
                continue
            sent = len(req.output_ids) - len(chunk.token_ids)
            collected, end = self._e.logprobs, len(req.output_ids)
            on_event(TokenEvent(tuple(chunk.token_ids), chunk.finish_reason, req.cached_tokens,
                                self._e.now(), chunk.text, collected.output_logprobs(rid, sent, end),
                                collected.output_top_logprobs(rid, sent, end)))
            if chunk.finished:
                del self._listeners[rid]
                self._e.forget(req)

    def _fail_all(self, message: str) -> None:
        """Every open request, and every one still in the inbox, ends aborted with `message`."""
        end = FinishReason.by_abort(message)
        self._drop_arrived(None, message)
        for rid, (req, on_event) in list(self._listeners.items()):
            on_event(TokenEvent((), end, req.cached_tokens, self._e.now()))
            del self._listeners[rid]
        for item in self._inbox.take():   # NOTE: closed: nothing is posted after this
            if isinstance(item, Submitted):
                item.on_event(TokenEvent((), end, 0, self._e.now()))

    def _snapshot(self) -> EngineStats:
        sched = self._e.scheduler
        load, cfg = sched.load(), sched.config
        return EngineStats(load.running_requests, load.queued_requests, sched.mem.kv_in_use(),
                           cfg.max_total_tokens, cfg.max_running_requests, cfg.context_length)
