"""`ServingLoop`: an online engine (`shared.online.online_engine`) around a `Stepper`
(`shared.online.stepper`), whichever executor steps: the loop runs on a thread of its own
beside the server's event loop (`shared.online.engine_thread`), so that no request blocks
another and the server never waits on a step.

The server's threads validate (`Stepper.check` reads the config only) and post to the inbox
(`shared.online.engine_inbox`). Each turn on the loop's thread takes the inbox (an abort ends
its request wherever it is), admits what arrived and steps (`shared.loop.admission_turn`:
under the overlap schedule a request arriving during a step waits in the arrival buffer,
`shared.online.arrival_buffer`), and sends every admitted request its news as soon as a
step's result is processed, with the stats. `stop()` aborts what is in flight,
turns until the stepper is idle (`Stepper.quiesce`) and joins the thread; an error that
killed the thread ends every open request and is raised there.
NOTE: only the loop's thread touches the stepper's scheduler; `stats()` reads the snapshot
it publishes each time it sends events (each turn, and as each step's last result is in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shared.loop.admission_turn import admission_turn
from shared.online.arrival_buffer import ArrivalBuffer
from shared.online.engine_inbox import Abort, EngineInbox
from shared.online.engine_thread import EngineThread
from shared.online.online_engine import EngineStats, TokenEvent
from shared.online.stepper import Stepper, Submitted
from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError

if TYPE_CHECKING:
    from shared.request.req import Req
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace

IDLE_POLL_S = 0.05
SHUTDOWN = "the server is shutting down"
OnEvent = Callable[[TokenEvent], None]


class ServingLoop:
    def __init__(self, stepper: Stepper) -> None:
        self._stepper = stepper
        self.model_name, self.vocab_size = stepper.model_name, stepper.vocab_size
        self.context_length = stepper.context_length
        self._inbox: EngineInbox[Submitted] = EngineInbox()
        self._listeners: dict[str, tuple[Req, OnEvent]] = {}
        self._arrived = ArrivalBuffer(lambda s: s.arrival, lambda s: s.rid)   # not admitted yet
        self._loop = EngineThread(stepper.thread_name, self._inbox, self._turn,
                                  lambda e: self._fail_all(f"the engine failed: {e!r}"))
        self._stats = stepper.stats()

    # --- the server's side (any thread) --------------------------------------------------

    def start(self) -> None:
        self._stepper.start()
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def submit(self, rid: str, input_ids: Sequence[int], params: SamplingParams,
               on_event: OnEvent) -> None:
        self._stepper.check(input_ids, params)
        ids, arrival = list(input_ids), self._stepper.arrival_time()
        self._inbox.submit(rid, on_event, lambda tell: Submitted(rid, ids, params, arrival, tell))
        self._loop.wake()

    def abort(self, rid: str) -> bool:
        if not self._inbox.abort(rid):
            return False
        self._loop.wake()
        return True

    def stats(self) -> EngineStats:
        return self._stats   # NOTE: published by the loop's thread with its events (_emit)

    def now(self) -> float:
        return self._stepper.now()

    def server_info(self) -> dict:
        return self._stepper.header()

    def trace(self) -> Trace:
        return self._stepper.trace()

    # --- the loop's thread -------------------------------------------------------------

    def _turn(self) -> bool:
        """Admit, step, send what is new; False once stopping and idle."""
        stopping = self._loop.stopping   # NOTE: read first: then this drain takes every last post
        self._drain_inbox()
        if stopping:
            self._abort_all()
        s = self._stepper
        ran = admission_turn(s.time(), s.admission_time, self._admit_until,
                             lambda now: s.step(now, self._emit), s.catch_up)
        self._emit()
        if ran is not None:
            return True
        if stopping and not self._arrived and s.quiesce():
            return False
        self._loop.idle(IDLE_POLL_S)
        s.catch_up()   # NOTE: idle, the clock follows the wall
        return True

    def _drain_inbox(self) -> None:
        for item in self._inbox.take():
            if not isinstance(item, Abort):
                self._arrived.add(item)
                continue
            if item.rid in self._listeners:
                self._stepper.abort(item.rid)
            self._drop_arrived(item.rid, "aborted before it was scheduled")   # NOTE: and its twins

    def _admit_until(self, t: float) -> bool:
        """Admit the requests taken from the inbox that arrived by `t`; whether any did."""
        arrived = self._arrived.take_until(t)
        for s in arrived:
            self._admit(s)
        return bool(arrived)

    def _admit(self, s: Submitted) -> None:
        try:
            req = self._stepper.admit(s)
        except InvalidRequestError as e:   # NOTE: e.g. its rid is taken; the others go on
            s.on_event(self._ended(FinishReason.by_abort(str(e))))
            return
        self._listeners[s.rid] = (req, s.on_event)

    def _drop_arrived(self, rid: str | None, message: str) -> None:
        """End `rid` (None: every one) among the requests not admitted yet, aborted."""
        for s in self._arrived.take(rid):
            s.on_event(self._ended(FinishReason.by_abort(message)))

    def _abort_all(self) -> None:
        self._drop_arrived(None, SHUTDOWN)
        for req, _ in self._listeners.values():
            if not req.finished():
                self._stepper.abort(req.rid, SHUTDOWN)

    def _emit(self) -> None:
        """Send each admitted request its news, the finished ones their last event; publish
        the stats (NOTE: also while a step runs: the batch it holds counts as running)."""
        for rid, (req, on_event) in list(self._listeners.items()):
            event = self._stepper.increment(req)
            if event is None:
                continue
            on_event(event)
            if event.finish is not None:
                del self._listeners[rid]
                self._stepper.forget(req)
        self._stats = self._stepper.stats()

    def _fail_all(self, message: str) -> None:
        """Every open request, and every one still in the inbox, ends aborted with `message`."""
        end = FinishReason.by_abort(message)
        self._drop_arrived(None, message)
        for rid, (req, on_event) in list(self._listeners.items()):
            on_event(self._ended(end, req.cached_tokens))
            del self._listeners[rid]
        for item in self._inbox.take():   # NOTE: closed: nothing is posted after this
            if isinstance(item, Submitted):
                item.on_event(self._ended(end))

    def _ended(self, reason: FinishReason, cached_tokens: int = 0) -> TokenEvent:
        return TokenEvent((), reason, cached_tokens, self._stepper.time())
