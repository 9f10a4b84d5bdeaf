"""A step whose forward or sampling raises (after validation passed) is not the engine's
end: the requests it fails for are found by trying halves of the batch (bisection, first
half first), aborted with the error through `Scheduler.fail_batch`, and the step runs again
without them.

A request failing alone gets its own error. Rows that fail together although each half of
them runs (the error belongs to the batch as a whole) are aborted together, so a forward
that fails for every subset aborts every request in its batch. Each round aborts at least
one request, so retrying ends.

Except when the runner cannot run another step: under tensor parallelism a forward error is
fatal to the group (as in SGLang, whose ranks end the server): the other ranks may be inside
that forward's collectives, so no step is retried. The runner raises `FatalRunnerError`,
which passes through `runner_call` and out of the engine's step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.batch.forward_batch import ForwardBatch
from shared.batch.schedule_batch import ScheduleBatch
from shared.loop.failed_step import select_rows
from shared.loop.model_runner import RunnerOutput
from shared.loop.scheduler import Scheduler

RunStep = Callable[[ForwardBatch], tuple[RunnerOutput, Any]]  # forward + sample, or RunnerError
Ran = tuple[ForwardBatch, RunnerOutput, Any]


class RunnerError(RuntimeError):
    """The runner's forward or sampling raised (the `__cause__`): the requests of the
    batch failed, not the scheduler."""


class FatalRunnerError(RuntimeError):
    """The runner cannot run another step (its tensor-parallel group failed): no step is
    retried, every later forward raises it again."""


def runner_call(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), its error re-raised as RunnerError (a FatalRunnerError as it is)."""
    try:
        return fn(*args)
    except FatalRunnerError:
        raise
    except Exception as e:  # NOTE: every one ends as abort messages (run_isolating) or re-raised
        raise RunnerError(f"{type(e).__name__}: {e}") from e


def abort_message(error: RunnerError) -> str:
    return f"the step failed: {error}"


def run_isolating(scheduler: Scheduler, batch: ScheduleBatch, error: RunnerError, run: RunStep,
                  now: Callable[[], float]) -> Ran | None:
    """`batch`'s step raised `error`: abort the requests it fails for (at `now()`), and run
    it (`run`) without them. Returns what the run that went through ran and gave, or None
    when no request of the batch is left to run."""
    while True:
        # NOTE: under overlap the rows of requests finished during the forward leave first
        # (fail_batch); only when none did did the same rows fail together
        live = [i for i, r in enumerate(batch.reqs) if not r.finished()]
        failing = failing_rows(batch, live, error, run) if len(live) == len(batch) else {}
        scheduler.fail_batch(batch, {batch.reqs[i].rid: m for i, m in failing.items()}, now())
        if batch.is_empty():
            return None
        fb = ForwardBatch.init_new(batch)
        try:
            return (fb, *run(fb))
        except RunnerError as e:
            error = e


def failing_rows(batch: ScheduleBatch, rows: list[int], error: RunnerError, run: RunStep) -> dict[int, str]:
    """The rows among `rows` (which failed together with `error`) that fail, each with the
    abort message of the smallest failing set it was found in."""
    if len(rows) == 1:
        return {rows[0]: abort_message(error)}
    found: dict[int, str] = {}
    for half in (rows[: len(rows) // 2], rows[len(rows) // 2 :]):
        try:
            run(ForwardBatch.init_new(select_rows(batch, half)))
        except RunnerError as e:
            found |= failing_rows(batch, half, e, run)
    return found or dict.fromkeys(rows, abort_message(error))
