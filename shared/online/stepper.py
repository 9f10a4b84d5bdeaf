"""`Stepper`: one executor as a `ServingLoop` (`shared.online.serving_loop`) drives it: the real
executor (`exec.engine.online_engine`) or the simulator paced in wall-clock time
(`sim.run.online_sim`). The loop owns the inbox, the arrivals, the listeners and the
admission turn; a stepper checks and admits requests, steps, and tells each request's news.

Contract: `check`, `arrival_time`, `now`, `header`, `trace` and the attributes run on any
thread (they read the config, the clock, or the trace object); every other method runs on
the loop's thread, after `start()` (which the loop calls before starting that thread).
`time()` is the engine's clock there: where the next step starts, what events are stamped
with. `step(now, on_processed)` schedules at `now` and runs one step, calling
`on_processed()` right after the last step's result is processed (before this step's
forward is done, where the executor overlaps them); it returns what ran, or None when
nothing could run (the last result processed then). `increment` is a request's news since
its last one (None: nothing new); one with a finish is its last, after which the loop calls
`forget`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from shared.online.online_engine import EngineStats, TokenEvent
    from shared.request.req import Req
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace


class Submitted(NamedTuple):
    """A request the server submitted: what `Stepper.admit` makes a `Req` of."""
    rid: str
    input_ids: list[int]
    params: SamplingParams
    arrival: float                              # `Stepper.arrival_time()` at the submit
    on_event: Callable[[TokenEvent], None]


class Stepper(Protocol):
    model_name: str
    vocab_size: int
    context_length: int
    thread_name: str

    def check(self, input_ids: Sequence[int], params: SamplingParams) -> None:
        """Raise InvalidRequestError naming the field unless `admit` could take it."""

    def arrival_time(self) -> float: ...

    def now(self) -> float: ...

    def header(self) -> dict:
        """What /get_server_info reports of the engine (`OnlineEngine.server_info`)."""

    def trace(self) -> Trace: ...

    def start(self) -> None: ...

    def time(self) -> float: ...

    def catch_up(self) -> float:
        """Nothing ran (or the loop idled): the clock follows the wall; returns `time()`."""

    def admission_time(self, now: float) -> float: ...

    def admit(self, s: Submitted) -> Req:
        """Queue `s` in the scheduler; InvalidRequestError (nothing queued) if refused."""

    def step(self, now: float, on_processed: Callable[[], None]) -> object | None: ...

    def abort(self, rid: str, message: str = ...) -> bool: ...

    def increment(self, req: Req) -> TokenEvent | None: ...

    def forget(self, req: Req) -> None: ...

    def quiesce(self) -> bool:
        """True, once nothing is left to run (what remains finished), for a stopping loop."""

    def stats(self) -> EngineStats: ...
