"""`admission_turn`: one turn of a driver's loop around the `Scheduler`, as SGLang's event
loop receives requests between steps.

Admit what arrived by `Scheduler.admission_time(now)` (now, or under the overlap schedule the
start of the step still unprocessed) and step at `now`; when nothing ran, let the clock catch
up (`catch_up()`: the wall clock, or simulated time as it stands) and, if anything arrived
by then, admit it and step again (the loop's next turn: nothing runs in between).
NOTE: when a step finds nothing to run it has processed the last result, so the scheduler's
admission time is `now` again: the second admission takes everything that arrived by then.
Every driver runs this turn: the SimPy driver (`sim.run.driver`), the real executor's online
run (`exec.engine.online`) and the serving loop (`shared.online.serving_loop`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")


def admission_turn(now: float, admission_time: Callable[[float], float],
                   admit_until: Callable[[float], bool], step: Callable[[float], R | None],
                   catch_up: Callable[[], float]) -> R | None:
    """Run one turn at `now`: `admit_until(t)` admits what arrived by t and says whether
    anything did, `step(t)` steps at t (None: nothing ran). Returns what the last step
    returned."""
    admit_until(admission_time(now))
    ran = step(now)
    if ran is not None:
        return ran
    now = catch_up()
    return step(now) if admit_until(now) else None
