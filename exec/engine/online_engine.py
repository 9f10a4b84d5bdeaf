"""`ExecStepper`: the real executor under a `ServingLoop` (`shared.online.stepper`): an
`exec.Engine` stepped on the loop's thread. Each step streams (through `on_processed`) as
soon as the last step's result is processed, under the overlap schedule while the next
forward runs, as SGLang streams while the GPU runs the next batch; a request's news is its
new tokens and text (the Engine's detokenizer: stop strings cut, no partial character), with
their logprobs when asked for. The clock is the Engine's (seconds since it started).

    online = ServingLoop(ExecStepper(Engine(path), "my-model", path))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shared.online.online_engine import EngineStats, TokenEvent

if TYPE_CHECKING:
    from exec.engine.engine import Engine
    from exec.engine.step_outcome import StepOutcome
    from shared.online.stepper import Submitted
    from shared.request.req import Req
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace


class ExecStepper:
    thread_name = "exec-engine"

    def __init__(self, engine: Engine, model_name: str, model_path: str | None = None) -> None:
        self._e, self.model_name, self._model_path = engine, model_name, model_path
        self.vocab_size, self.context_length = engine.model_info.vocab_size, engine.config.context_length

    def check(self, input_ids: Sequence[int], params: SamplingParams) -> None:
        self._e.check_request(input_ids, params)

    def arrival_time(self) -> float:
        return self._e.now()

    now = time = catch_up = arrival_time   # NOTE: the Engine's clock is the wall's: one reading each

    def header(self) -> dict:
        return {"mode": "exec", "model_path": self._model_path, "served_model_name": self.model_name,
                **self._e.trace.executor, **dataclasses.asdict(self._e.config)}

    def trace(self) -> Trace:
        return self._e.trace

    def start(self) -> None:
        pass

    def admission_time(self, now: float) -> float:
        return self._e.admission_time(now)

    def admit(self, s: Submitted) -> Req:
        req = self._e.make_requests([s.input_ids], [s.params], rids=[s.rid], arrivals=[s.arrival])[0]
        self._e.add_request(req)
        return req

    def step(self, now: float, on_processed: Callable[[], None]) -> StepOutcome | None:
        step = self._e.step(now, on_processed=on_processed)
        if step is None:   # NOTE: overlap: this poll processed the last step's result
            self._e.take_finished()
        return step

    def abort(self, rid: str, message: str = "aborted by the client") -> bool:
        return self._e.end_at_next_step(rid, message)

    def increment(self, req: Req) -> TokenEvent | None:
        chunk = self._e.increment(req)
        if chunk is None:
            return None
        sent, end, collected = len(req.output_ids) - len(chunk.token_ids), len(req.output_ids), self._e.logprobs
        return TokenEvent(tuple(chunk.token_ids), chunk.finish_reason, req.cached_tokens, self._e.now(),
                          chunk.text, collected.output_logprobs(req.rid, sent, end),
                          collected.output_top_logprobs(req.rid, sent, end))

    def forget(self, req: Req) -> None:
        self._e.forget(req)

    def quiesce(self) -> bool:
        if not self._e.is_idle():
            return False
        self._e.drain()
        return True

    def stats(self) -> EngineStats:
        return self._e.stats()
