"""Decode runs: a scheduled decode step and the steps that follow it unchanged, applied at once.

Between events (an arrival, a finish, an abort, an admission attempt, a KV shortage that
evicting cached prefixes cannot cover) the running batch decodes step after step with the
same requests, and each step only takes one KV slot and appends one token per request. A
driver that knows the next steps' tokens and durations in advance (the simulator's token
source and cost model do) can apply them in bulk, right after `get_next_batch_to_run`
returned a DECODE batch (step 0, already prepared):

    limit = scheduler.decode_run_limit(max_steps)        # step 0 and the steps that may follow
    tokens = ...                                         # [k, B], k <= limit.steps: their tokens
    f = scheduler.decode_run_steps_before_finish(tokens, limit.length_limit_step)
    m = min(f + 1 + overlap, k)                          # overlap: the step after f too
    done = scheduler.apply_decode_run(tokens[:m], starts, graph, padded_batch_size,
                                      finish_step=f if f < k else None)

Step f is the one in which a request may end: its result is processed as
`process_batch_result` processes a decode step's (at its end time, starts[f + 1]) and the
requests that finished are returned. Under the overlap schedule the run's last step stays
launched (its result is processed by the next `get_next_batch_to_run`), so the run takes
the step after f as well, scheduled before f's result is processed.

That leaves the scheduler, the KV memory, the requests and the trace exactly as rounds of
`process_batch_result` -> `get_next_batch_to_run` would have, start times and durations
included. NOTE: that equality is the contract;
tests/test_decode_run.py checks it on whole simulations, with and without runs, field by field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shared.logit_rows import recorded_decode_rows
from shared.step_record import StepValues

if TYPE_CHECKING:
    from shared.kv_memory import KVMemory
    from shared.req import Req
    from shared.schedule_batch import ScheduleBatch
    from shared.scheduler import Scheduler


class DecodeRunLimit(NamedTuple):
    steps: int              # the scheduled step and those that may follow (>= 1)
    length_limit_step: int  # steps_to_length_limit of the batch
    output_lens: np.ndarray  # [B] each request's outputs before the scheduled step


def decode_run_limit(batch: ScheduleBatch, mem: KVMemory, steady: bool,
                     max_steps: int, overlap: bool = False) -> DecodeRunLimit:
    """How many decode steps, the one just scheduled (`batch`, prepared by
    get_next_batch_to_run) first, could follow one another with no scheduling decision,
    provided none of them but the last finishes a request: at least 1; more only while the
    scheduler is `steady` (nothing can be admitted, no request is chunked, aborted or just
    finished) and every step finds its KV slots (free, or at page size 1 freed by evicting
    cached prefixes as check_decode_mem does, never by retracting); at most up to the
    first step in which a request may reach its length limit (under `overlap`, the step
    after it: scheduled before that step's result is processed). Tokens can end requests
    earlier: see steps_before_finish."""
    lens = batch.output_lens()
    to_limit = steps_to_length_limit(batch, lens)
    if not steady:
        return DecodeRunLimit(1, to_limit, lens)
    free = _steps_with_slots(mem, batch, max_steps)
    return DecodeRunLimit(max(1, min(max_steps, to_limit + 1 + overlap, 1 + free)), to_limit, lens)


def steps_to_length_limit(batch: ScheduleBatch, output_lens: np.ndarray) -> int:
    """The first decode step j (0: the scheduled one) in which `_finish_decoded` checks some
    request for its length limit (may_finish's length test), or a negative number if one
    was due earlier. `output_lens` ([B]): batch.output_lens() before the scheduled step."""
    # NOTE: after step j a request has output_lens + j + 1 outputs; _finish_decoded checks it
    # for a finish once that reaches max_new_tokens.
    return int(np.minimum.reduce(batch.max_new_tokens - 1 - output_lens))


def _steps_with_slots(mem: KVMemory, batch: ScheduleBatch, max_steps: int) -> int:
    """Steps j = 0, 1, ... before which the next step's slots can be had: at page size 1 B
    slots free or evictable (check_decode_mem evicts, and never retracts); with pages,
    B * page_size free (neither check_decode_mem nor alloc_for_decode evicts)."""
    ps, b, free = mem.page_size, len(batch), mem.allocator.available_size()
    if ps == 1:  # NOTE: eviction moves tokens from evictable to free: the sum only shrinks by B a step
        return (free + mem.tree_cache.evictable_size()) // b
    positions = batch.seq_lens + np.arange(max_steps)[:, None]       # [k, B] token written
    taken = ps * np.count_nonzero(positions % ps == 0, axis=1)       # [k] slots step j opens
    before = free - (np.cumsum(taken) - taken)                       # [k] free before step j
    short = np.flatnonzero(before < b * ps)
    return int(short[0]) if len(short) else max_steps


def steps_before_finish(s: Scheduler, tokens: np.ndarray, length_limit_step: int) -> int:
    """The number of leading steps of `tokens` ([k, B], step j's id per request; step 0 the
    scheduled one) in which no request could finish (`_finish_decoded`'s test), given the
    batch's steps_to_length_limit."""
    batch = s.running_batch
    # NOTE: may_finish's length test holds in step j exactly when j >= steps_to_length_limit,
    # so only the ids of the steps before need a look.
    f = max(0, min(len(tokens), length_limit_step))
    if f == 0:
        return 0
    hit = s.results.may_finish_by_token(batch, tokens[:f])           # [f, B]
    first = int(hit.argmax())                                        # row-major: earliest step
    return first // len(batch) if hit.flat[first] else f


def apply_decode_run(s: Scheduler, tokens: np.ndarray, starts: list[float], graph: bool,
                     padded_batch_size: int, finish_last: bool = False,
                     pend_last: bool = False, finish_before_last: bool = False) -> list[Req]:
    """Apply k = len(tokens) >= 1 decode steps, the first the scheduled one; step j starts at
    starts[j] and ends at starts[j + 1]. With `finish_last`, step k - 1's result is processed
    as process_batch_result would (finishing requests at starts[k]); returns the requests
    that finished. With `pend_last` (the overlap schedule), step k - 1 is scheduled (the
    batch holds its state and tokens[k - 1] as output_ids) but its result is left for the
    caller to keep as launched; with `finish_before_last` too, step k - 2's result is
    processed (finishing requests at starts[k - 1]) after step k - 1 was scheduled, as the
    overlap loop processes it. The caller checked the steps against decode_run_limit and
    steps_before_finish."""
    batch = s.running_batch
    k, seq0 = len(tokens), batch.seq_lens                            # seq0: step 0's lengths
    n = k - 1                                                        # steps after step 0 to allocate
    used0 = s.mem.allocator.size - s.mem.allocator.available_size()
    if n:
        slots, positions, inputs, used = _schedule_steps(s.mem, batch, tokens)  # [k, B] each
    else:  # step 0 alone: it is scheduled already
        slots, positions, inputs, used = batch.out_cache_loc[None], None, batch.input_ids[None], []
    # NOTE: list.extend / list.append mapped over the requests (C speed; the Nones are dropped)
    outputs = batch.per_request_info().output_ids
    kept = n if pend_last else k                                     # steps whose tokens go in now
    if kept > 1:
        list(map(list.extend, outputs, tokens[:kept].T.tolist()))
    elif kept:
        list(map(list.append, outputs, tokens[0].tolist()))
    recorded = n - finish_before_last if finish_last or pend_last else k  # the rest below
    if recorded:
        positions = seq0 - 1 + np.arange(k)[:, None] if positions is None else positions
        _record(s, batch, inputs[:recorded], positions, slots, tokens[:recorded], [used0, *used],
                starts, graph, padded_batch_size)
    for _ in range(n):
        s.new_token_ratio.on_decode()
    done = _finish_step(s, batch, n - 1, (seq0, inputs, slots, tokens), [used0, *used], starts,
                        graph, padded_batch_size) if finish_before_last else []
    batch.set_decode_state(seq0 + n, inputs[n], slots[n], tokens[n])
    s.step_start = starts[n]
    if not finish_last or pend_last:
        return done
    return s.results.process_decoded(batch, tokens[n], starts[k], graph, padded_batch_size)


def _finish_step(s: Scheduler, batch: ScheduleBatch, j: int, run: tuple, used: list[int],
                 starts: list[float], graph: bool, padded: int) -> list[Req]:
    """Process step j of a run (overlap) after step j + 1 was scheduled: requests finishing
    now also free the slots step j + 1 allocated for them."""
    seq0, inputs, slots, tokens = run
    batch.set_decode_state(seq0 + j, inputs[j], slots[j], tokens[j])
    s.step_start = starts[j]
    inflight = batch.copy_for_result()
    inflight.seq_lens = seq0 + j + 1                                 # step j + 1's lengths
    return s.results.process_decoded(batch, tokens[j], starts[j + 1], graph, padded,
                                     observed=(len(s.waiting_queue), used[j]), inflight=inflight)


def _schedule_steps(mem: KVMemory, batch: ScheduleBatch, tokens: np.ndarray):
    """Slots (allocated for steps 1..k-1, written into req_to_token), positions and inputs
    of the k = len(tokens) > 1 steps of a run, [k, B] each, and the KV tokens in use after
    each allocation."""
    n, seq0 = len(tokens) - 1, batch.seq_lens
    more, used = _alloc_slots(mem, batch, n)                         # [n, B], [n]
    slots = np.concatenate((batch.out_cache_loc[None], more))        # [k, B]
    positions = seq0 - 1 + np.arange(n + 1)[:, None]                 # [k, B]
    mem.req_to_token_pool.req_to_token[batch.req_pool_indices, positions[1:]] = more
    inputs = np.concatenate((batch.input_ids[None], tokens[:n]))     # [k, B] step j's input
    return slots, positions, inputs, used


def _alloc_slots(mem: KVMemory, batch: ScheduleBatch, k: int) -> tuple[np.ndarray, list[int]]:
    """[k, B] slots as the next k calls of alloc_for_decode would hand them out (for
    positions seq_lens, seq_lens + 1, ...), and the KV tokens in use after each."""
    a, b = mem.allocator, len(batch)
    if k == 0:
        return np.zeros((0, b), np.int64), []
    if mem.page_size == 1:
        return _alloc_evicting(mem, b, k)
    table, rows, seq = mem.req_to_token_pool.req_to_token, batch.req_pool_indices, batch.seq_lens
    last = table[rows, seq - 1].astype(np.int64)
    out, used = [], []
    for j in range(k):
        last = a.alloc_decode(seq + j + 1, last)
        out.append(last)
        used.append(a.size - a.available_size())
    return np.stack(out), used


def _alloc_evicting(mem: KVMemory, b: int, k: int) -> tuple[np.ndarray, list[int]]:
    """_alloc_slots at page size 1: before a step finds fewer than B free slots, evict B
    cached tokens (check_decode_mem's eviction); the steps in between take their slots in
    one allocation (FIFO: step j takes the next B free slots)."""
    a, parts, used = mem.allocator, [], []
    while k:
        if a.available_size() < b:
            mem.tree_cache.evict(b)
        t = min(k, a.available_size() // b)
        if t == 0:
            raise AssertionError("decode run past its KV limit (decode_run_limit)")
        used0 = a.size - a.available_size()
        parts.append(a.alloc(t * b).reshape(t, b))
        used += [used0 + (j + 1) * b for j in range(t)]
        k -= t
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), used


def _record(s: Scheduler, batch: ScheduleBatch, inputs: np.ndarray, positions: np.ndarray,
            slots: np.ndarray, tokens: np.ndarray, used: list[int], starts: list[float],
            graph: bool, padded: int) -> None:
    rows, _, empty = recorded_decode_rows(len(batch))
    rids, pool_rows, first, queue = batch.rids, batch.req_pool_indices, s.step, len(s.waiting_queue)
    seq_lens = positions + 1                                         # [k, B]
    s.trace.append_steps_values([StepValues(
        step=first + j, forward_mode="DECODE", rids=rids, input_ids=inputs[j],
        positions=positions[j], out_cache_loc=slots[j], req_pool_indices=pool_rows,
        seq_lens=seq_lens[j], extend_prefix_lens=empty, extend_seq_lens=empty,
        extend_start_loc=empty, extend_logprob_start_lens=empty, pruned_rows=rows,
        sample_indices=rows, next_token_ids=tokens[j], graph=graph, padded_batch_size=padded,
        start_time=starts[j], duration=starts[j + 1] - starts[j], queue_len=queue,
        kv_used_tokens=used[j]) for j in range(len(tokens))])
    s.step += len(tokens)
