"""`OverlapWorker`: the real executor's half of SGLang's overlap schedule (ARCHITECTURE §5).

The scheduler schedules batch N+1 before it processes the result of batch N
(`Scheduler.schedule_next`, then `Scheduler.process_last`). Here the forward of N+1 runs on
a worker thread while the calling thread processes N's result; sampling N+1 waits for both,
as SGLang samples after the last result was processed (penalties and stop checks read the
outputs it appended). torch releases the GIL inside its kernels, so the two overlap.

NOTE: N+1's inputs are known before N's result is processed: its decode inputs are N's
sampled ids (SGLang's future token ids, resolved on the device there). What processing N
changes that N+1's forward reads (a request row re-pointed at the prefix cache's equal
copy of its KV, slots freed by a request that finished) holds equal KV or is not handed
out again before N+1 completes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class OverlapWorker:
    """One forward thread, started on first use."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def forward_while(self, forward: Callable[[], T], work: Callable[[], object]) -> T:
        """forward() (the runner's forward of the next batch) on the worker thread while
        `work()` runs here; the forward's output (its exception, if it raised) once both are
        done. An exception of `work` wins: it is raised once the forward is done."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batchtwin-forward")
        future = self._pool.submit(forward)
        try:
            work()
        except BaseException:
            # NOTE: wait for the forward; an error of the work (the scheduler's) is the one
            # to report, as the batch's requests cannot be blamed for it
            future.exception()
            raise
        return future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
