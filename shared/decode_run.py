"""Decode runs: k decode steps of an unchanged running batch, applied at once.

Between events (an arrival, a finish, an abort, an admission attempt, a KV shortage) the
running batch decodes step after step with the same requests, and each step only takes one
KV slot and appends one token per request. A driver that knows the next steps' tokens and
durations in advance (the simulator's token source and cost model do) can apply them in bulk:

    k = scheduler.decode_run_limit(max_steps)          # steps the scheduler's state allows
    tokens = ...                                         # [k, B] the next k tokens per request
    k = scheduler.decode_run_steps_before_finish(tokens) # steps in which no request can end
    scheduler.apply_decode_run(tokens[:k], starts, graph, padded_batch_size)

That leaves the scheduler, the KV memory, the requests and the trace exactly as k rounds of
`get_next_batch_to_run` -> `process_batch_result` would have, start times and durations
included. NOTE: that equality is the contract; tests/test_decode_run.py checks it on whole
simulations, with and without runs, field by field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shared.kv_memory import KVMemory
    from shared.schedule_batch import ScheduleBatch
    from shared.scheduler import Scheduler

EMPTY = np.zeros(0, np.int64)
EMPTY.flags.writeable = False


def decode_run_limit(s: Scheduler, max_steps: int) -> int:
    """How many decode steps of the running batch can follow with no scheduling decision:
    the last step decoded this batch, nothing can be admitted, no request is chunked, aborted
    or finished, no request reaches its length limit, and every step finds its KV slots free
    without evicting. 0 when the next step must go through `get_next_batch_to_run`."""
    batch = s.running_batch
    if (batch is None or s.last_batch is not batch or not batch.forward_mode.is_decode()
            or s.pending_aborts or s._finished_since_filter or s.chunked_req is not None
            or (s.waiting_queue and not s.batch_is_full)):
        return 0
    # NOTE: after step j a request has seq_lens + j + 1 - prompt outputs; _process_decode
    # checks it for a finish once that reaches max_new_tokens - 1.
    to_limit = int(np.min(batch.max_new_tokens - 2 - (batch.seq_lens - batch.prompt_lens)))
    return max(0, min(max_steps, to_limit, _steps_with_free_slots(s.mem, batch, max_steps)))


def _steps_with_free_slots(mem: KVMemory, batch: ScheduleBatch, max_steps: int) -> int:
    """Steps j = 0, 1, ... before which at least B * page_size slots are free (so neither
    check_decode_mem nor alloc_for_decode evicts)."""
    ps, b, free = mem.page_size, len(batch), mem.allocator.available_size()
    if ps == 1:
        return free // b
    positions = batch.seq_lens + np.arange(max_steps)[:, None]       # [k, B] token written
    taken = ps * np.count_nonzero(positions % ps == 0, axis=1)       # [k] slots step j opens
    before = free - (np.cumsum(taken) - taken)                       # [k] free before step j
    short = np.flatnonzero(before < b * ps)
    return int(short[0]) if len(short) else max_steps


def steps_before_finish(s: Scheduler, tokens: np.ndarray) -> int:
    """The number of leading steps of `tokens` ([k, B], step j's id per request) in which
    no request could finish (the same test `_process_decode` applies to every step)."""
    batch = s.running_batch
    seq = batch.seq_lens + np.arange(1, len(tokens) + 1)[:, None]   # [k, B] after step j
    maybe = s.results.may_finish(batch, seq, tokens).any(axis=1)     # [k]
    hits = np.flatnonzero(maybe)
    return int(hits[0]) if len(hits) else len(tokens)


def apply_decode_run(s: Scheduler, tokens: np.ndarray, starts: list[float], graph: bool,
                     padded_batch_size: int) -> None:
    """Apply k = len(tokens) decode steps; step j starts at starts[j] and ends at
    starts[j + 1]. The caller checked k against decode_run_limit / steps_before_finish."""
    batch = s.running_batch
    k = len(tokens)
    rows, seq0 = batch.req_pool_indices, batch.seq_lens
    slots, used = _alloc_slots(s.mem, batch, k)                      # [k, B], [k]
    positions = seq0 + np.arange(k)[:, None]                         # [k, B]
    s.mem.req_to_token_pool.req_to_token[rows, positions] = slots
    inputs = np.vstack((batch.output_ids[None], tokens[:-1]))        # [k, B]
    for req, toks in zip(batch.reqs, tokens.T.tolist(), strict=True):
        req.output_ids.extend(toks)
    _record(s, batch, inputs, positions, slots, tokens, used, starts, graph, padded_batch_size)
    for _ in range(k):
        s.new_token_ratio.on_decode()
    batch.seq_lens = seq0 + k
    batch.input_ids, batch.out_cache_loc, batch.output_ids = inputs[-1], slots[-1], tokens[-1]
    batch._positions = None
    s.step_start = starts[k - 1]


def _alloc_slots(mem: KVMemory, batch: ScheduleBatch, k: int) -> tuple[np.ndarray, list[int]]:
    """[k, B] slots as k calls of alloc_for_decode would hand them out, and the KV tokens in
    use after each step."""
    a, b = mem.allocator, len(batch)
    used0 = a.size - a.available_size()
    if mem.page_size == 1:
        slots = a.alloc(k * b).reshape(k, b)   # FIFO: step j takes the next B free slots
        return slots, [used0 + (j + 1) * b for j in range(k)]
    table, rows, seq = mem.req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens
    last = table[rows, seq - 1].astype(np.int64)
    out, used = [], []
    for j in range(k):
        last = a.alloc_decode(seq + j + 1, last)
        out.append(last)
        used.append(a.size - a.available_size())
    return np.stack(out), used


def _record(s: Scheduler, batch: ScheduleBatch, inputs: np.ndarray, positions: np.ndarray,
            slots: np.ndarray, tokens: np.ndarray, used: list[int], starts: list[float],
            graph: bool, padded: int) -> None:
    rows = np.arange(len(batch), dtype=np.int64)
    rids, queue, append = batch.rids, len(s.waiting_queue), s.trace.append_step
    for j in range(len(tokens)):
        append(step=s.step, forward_mode="DECODE", rids=rids, input_ids=inputs[j],
               positions=positions[j], out_cache_loc=slots[j], req_pool_indices=batch.req_pool_indices,
               seq_lens=positions[j] + 1, extend_prefix_lens=EMPTY, extend_seq_lens=EMPTY,
               extend_start_loc=EMPTY, extend_logprob_start_lens=EMPTY, pruned_rows=rows,
               sample_indices=rows, next_token_ids=tokens[j], graph=graph,
               padded_batch_size=padded, start_time=starts[j],
               duration=starts[j + 1] - starts[j], queue_len=queue, kv_used_tokens=used[j])
        s.step += 1
