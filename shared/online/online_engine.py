"""`OnlineEngine`: what a server needs of an engine, whichever executor runs it (the
simulator paced in wall-clock time, `sim.run.online_sim`, or the real one), so the server never
branches on the mode after construction.

Contract:
- `start()` / `stop()`: the engine's own thread, beside the server's event loop; `stop()`
  aborts what is still in flight, drains the scheduler and runs its idle leak check.
- `submit(rid, input_ids, params, on_event)` validates the request and queues it, or raises
  InvalidRequestError naming the field (nothing queued, nothing else disturbed), or
  EngineUnavailable once it stopped or failed (the server answers 503). The engine
  then calls `on_event(TokenEvent)` from its thread for every batch of new tokens of that
  request, the last one with its finish reason (a stop, the length, an abort). A submit
  that returns gets exactly one last event, whatever `stop()` does meanwhile on another
  thread (`shared.online.engine_inbox`): a request is refused or answered, never lost.
- `abort(rid)`: end the request (its KV freed at the engine's next step): True if a request
  `rid` is open (accepted, its last event not sent yet, wherever it waits), which now ends
  aborted unless its last event was already decided; False if none is.
- `stats()`: a snapshot for /metrics and /get_server_info; `now()`: the engine's clock in
  seconds (the one `TokenEvent.time` reads: simulated seconds for the simulator).
- `server_info()`: what /get_server_info reports of the engine (mode, model, its effective
  config), JSON-ready; `trace()`: the engine's step trace (after `stop()`: the whole run,
  which `batchtwin replay` takes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from shared.loop.scheduler import Scheduler
    from shared.request.finish_reason import FinishReason
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace


class EngineUnavailable(RuntimeError):
    """The engine takes no new requests: it is stopping, stopped, or its thread failed."""


class TokenEvent(NamedTuple):
    token_ids: tuple[int, ...]             # new output tokens since the last event
    finish: FinishReason | None = None     # set on a request's last event
    cached_tokens: int = 0                 # prompt tokens served from the prefix cache
    time: float = 0.0                      # the engine's clock at the event (seconds)
    text: str | None = None                # their text, when the engine detokenizes (else the
                                           # server decodes token_ids)
    logprobs: tuple[float, ...] = ()       # one per token id, when requested and known
    top_logprobs: tuple = ()               # per token id, its top (token id, logprob) pairs,
                                           # most likely first, when requested and known


class EngineStats(NamedTuple):
    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    max_running_requests: int
    context_length: int

    @classmethod
    def of(cls, scheduler: Scheduler) -> EngineStats:
        """`scheduler`'s now (read on the thread that steps it)."""
        load, cfg = scheduler.load(), scheduler.config
        return cls(load.running_requests, load.queued_requests, scheduler.mem.kv_in_use(),
                   cfg.max_total_tokens, cfg.max_running_requests, cfg.context_length)

    @property
    def kv_usage(self) -> float:
        return self.kv_used_tokens / self.kv_capacity_tokens if self.kv_capacity_tokens else 0.0


class OnlineEngine(Protocol):
    model_name: str
    vocab_size: int
    context_length: int

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def submit(self, rid: str, input_ids: Sequence[int], params: SamplingParams,
               on_event: Callable[[TokenEvent], None]) -> None: ...

    def abort(self, rid: str) -> bool: ...

    def stats(self) -> EngineStats: ...

    def now(self) -> float: ...

    def server_info(self) -> dict: ...

    def trace(self) -> Trace: ...
