"""`OverlapWorker`: the real executor's half of SGLang's overlap schedule (DESIGN §8).

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

from shared.forward_batch import ForwardBatch
from shared.model_runner import ModelRunner, RunnerOutput


class OverlapWorker:
    """One forward thread, started on first use."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def forward_while(self, runner: ModelRunner, fb: ForwardBatch,
                      work: Callable[[], object]) -> RunnerOutput:
        """runner.forward(fb) on the worker thread while `work()` runs here; the forward's
        output (its exception, if it raised) once both are done."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batchtwin-forward")
        future = self._pool.submit(runner.forward, fb)
        try:
            work()
        finally:
            out = future.result()  # NOTE: wait for the forward even if `work` raised
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
