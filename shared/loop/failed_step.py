"""A step whose forward or sampling raised (after validation passed): the executor names
the requests it fails for, they end aborted, and the step runs again without them.

`Scheduler.fail_batch` is the scheduler's half: `abort_failed` finishes the named requests
and `keep_rows` narrows the scheduled batch to the others, still prepared for its forward,
so the retried step is an ordinary one (`process_batch_result`). `select_rows` gives the
executor a narrowed copy to try a subset of the rows on while it looks for the failing ones.
"""

from __future__ import annotations

import numpy as np

from shared.batch.schedule_batch import ScheduleBatch
from shared.loop.batch_result import BatchResultProcessor
from shared.memory.kv_memory import KVMemory
from shared.request.finish_reason import FinishReason
from shared.request.req import Req


def abort_failed(batch: ScheduleBatch, errors: dict[str, str], mem: KVMemory,
                 results: BatchResultProcessor, now: float) -> list[Req]:
    """Finish the live requests of `batch` named in `errors` (rid -> message) as aborted at
    `now` (a pending abort keeps its own reason, as check_finished orders them) and release
    their KV, the slots this batch allocated included. Returns them, in batch order."""
    done = []
    for i, req in enumerate(batch.reqs):
        message = errors.get(req.rid)
        if message is None or req.finished():
            continue
        req.finished_reason = req.to_finish or FinishReason.by_abort(message)
        batch.commit_kv_lens(i)  # NOTE: the batch's seq_len: every slot it allocated goes back
        # NOTE: this forward's KV was never written whole: none of it enters the prefix cache
        mem.release_kv_cache(req, is_insert=False)
        results.record_finished(req, now)
        done.append(req)
    return done


def select_rows(batch: ScheduleBatch, rows: list[int]) -> ScheduleBatch:
    """A copy of a prepared batch holding only `rows` (increasing indices), for trying them
    alone; the batch itself is unchanged."""
    sub = batch.copy_for_result()
    keep_rows(sub, rows)
    return sub


def keep_rows(batch: ScheduleBatch, rows: list[int]) -> None:
    """Narrow a batch prepared for its forward (EXTEND, MIXED or DECODE) to `rows`
    (increasing indices), its token arrays with it, as if only those requests had been
    scheduled. The dropped rows' KV slots are the caller's to release."""
    if len(rows) == len(batch):
        return
    keep = np.zeros(len(batch), dtype=bool)
    keep[rows] = True
    first_decoding = len(batch) - len(batch.decoding_reqs)  # NOTE: MIXED: decode rows come last
    decoding = [r for i, r in enumerate(batch.reqs) if keep[i] and i >= first_decoding]
    tokens = keep if batch.forward_mode.is_decode() else np.repeat(keep, batch.extend_lens)
    input_ids, out_cache_loc = batch.input_ids[tokens], batch.out_cache_loc[tokens]
    extend = None
    if not batch.forward_mode.is_decode():
        extend = (batch.prefix_lens[keep], batch.extend_lens[keep], batch.extend_logprob_start_lens[keep],
                  _logprob_token_ids(batch, keep))
    batch.filter_batch(keep_indices=rows)  # reqs, per-request arrays, info; clears the rest
    batch.input_ids, batch.out_cache_loc, batch.decoding_reqs = input_ids, out_cache_loc, decoding
    if extend is not None:
        (batch.prefix_lens, batch.extend_lens, batch.extend_logprob_start_lens,
         batch.extend_input_logprob_token_ids) = extend
    if batch.chunked_req is not None and all(r is not batch.chunked_req for r in batch.reqs):
        batch.chunked_req = None


def _logprob_token_ids(batch: ScheduleBatch, keep: np.ndarray) -> np.ndarray | None:
    """The kept rows' part of extend_input_logprob_token_ids: request i owns
    extend_len - extend_logprob_start_len of them (ScheduleBatch._logprob_token_ids)."""
    ids = batch.extend_input_logprob_token_ids
    if ids is None:
        return None
    return ids[np.repeat(keep, batch.extend_lens - batch.extend_logprob_start_lens)]
