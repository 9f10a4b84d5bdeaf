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

The scheduler's methods above are the interface (the scheduler knows when a run is steady
and owns the queue); `DecodeRuns` does the work on the running batch with the collaborators
it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shared.loop.step_recorder import DecodeSteps, StepTimes

if TYPE_CHECKING:
    from shared.batch.schedule_batch import ScheduleBatch
    from shared.loop.batch_result import BatchResultProcessor
    from shared.loop.step_recorder import StepRecorder
    from shared.memory.kv_memory import KVMemory
    from shared.request.req import Req


class DecodeRunLimit(NamedTuple):
    steps: int              # the scheduled step and those that may follow (>= 1)
    length_limit_step: int  # steps_to_length_limit of the batch
    output_lens: np.ndarray  # [B] each request's outputs before the scheduled step


class RunPrice(NamedTuple):
    """How the run's steps ran: their start times (step j from starts[j] to starts[j + 1])
    and the runner's graph flag and padded batch size, the same for every step."""

    starts: list[float]
    graph: bool
    padded_batch_size: int


class RunEnd(NamedTuple):
    """How a run ends. `finish_last`: step k - 1's result is processed (it may finish
    requests). `pend_last` (overlap): step k - 1 is scheduled but its result is left for
    the caller to keep as launched; `finish_before_last` then has step k - 2's result
    processed after step k - 1 was scheduled, as the overlap loop processes it."""

    finish_last: bool = False
    pend_last: bool = False
    finish_before_last: bool = False


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


class DecodeRuns:
    """Applies decode runs to the running batch. Owns no scheduler state: it changes the
    batch, the KV memory `mem` and the requests, processes results through `results` and
    records the steps through `recorder`; the scheduler passes the rest in."""

    def __init__(self, mem: KVMemory, results: BatchResultProcessor,
                 recorder: StepRecorder) -> None:
        self.mem = mem
        self.results = results
        self.recorder = recorder

    def steps_before_finish(self, batch: ScheduleBatch, tokens: np.ndarray,
                            length_limit_step: int) -> int:
        """The number of leading steps of `tokens` ([k, B], step j's id per request; step 0
        the scheduled one) in which no request of `batch` could finish (`_finish_decoded`'s
        test), given the batch's steps_to_length_limit."""
        # NOTE: may_finish's length test holds in step j exactly when j >= steps_to_length_limit,
        # so only the ids of the steps before need a look.
        f = max(0, min(len(tokens), length_limit_step))
        if f == 0:
            return 0
        hit = self.results.may_finish_by_token(batch, tokens[:f])    # [f, B]
        first = int(hit.argmax())                                    # row-major: earliest step
        return first // len(batch) if hit.flat[first] else f

    def apply(self, batch: ScheduleBatch, tokens: np.ndarray, price: RunPrice, end: RunEnd,
              queue_len: int, aborts_pending: bool) -> list[Req]:
        """Apply k = len(tokens) >= 1 decode steps of `batch`, the first the scheduled one,
        ending as `end` says; returns the requests that finished. `queue_len` requests wait
        throughout. Afterwards the batch holds step k - 1's state (scheduled, its result
        processed unless `end.pend_last`). The caller checked the steps against
        decode_run_limit and steps_before_finish."""
        k, seq0 = len(tokens), batch.seq_lens                        # seq0: step 0's lengths
        n = k - 1                                                    # steps after step 0 to allocate
        used0 = self.mem.kv_used()
        if n:
            steps, used = self._schedule_steps(batch, tokens)        # [k, B] each
        else:  # step 0 alone: it is scheduled already
            steps = DecodeSteps(batch.input_ids[None], seq0[None] - 1, batch.out_cache_loc[None],
                                tokens)
            used = []
        self._append_outputs(batch, tokens[:n if end.pend_last else k])
        recorded = n - end.finish_before_last if end.finish_last or end.pend_last else k
        if recorded:
            self.recorder.record_decode_steps(batch, DecodeSteps(*(x[:recorded] for x in steps)),
                                              [used0, *used], price.starts, price.graph,
                                              price.padded_batch_size, queue_len)
        done = self._finish_step(batch, n - 1, steps, [used0, *used], price, queue_len,
                                 aborts_pending) if end.finish_before_last else []
        batch.set_decode_state(seq0 + n, steps.inputs[n], steps.slots[n], tokens[n])
        if not end.finish_last or end.pend_last:
            return done
        times = StepTimes(price.starts[n], price.starts[k], queue_len, None)
        return self.results.process_decoded(batch, tokens[n], times, price.graph,
                                            price.padded_batch_size, aborts_pending=aborts_pending)

    @staticmethod
    def _append_outputs(batch: ScheduleBatch, tokens: np.ndarray) -> None:
        """Append tokens ([j, B]) to the requests' output_ids."""
        # NOTE: list.extend / list.append mapped over the requests (C speed)
        outputs = batch.per_request_info().output_ids
        if len(tokens) > 1:
            list(map(list.extend, outputs, tokens.T.tolist()))
        elif len(tokens):
            list(map(list.append, outputs, tokens[0].tolist()))

    def _finish_step(self, batch: ScheduleBatch, j: int, steps: DecodeSteps, used: list[int],
                     price: RunPrice, queue_len: int, aborts_pending: bool) -> list[Req]:
        """Process step j of a run (overlap) after step j + 1 was scheduled: requests finishing
        now also free the slots step j + 1 allocated for them."""
        seq0 = steps.positions[0] + 1
        batch.set_decode_state(seq0 + j, steps.inputs[j], steps.slots[j], steps.tokens[j])
        inflight = batch.copy_for_result()
        inflight.seq_lens = seq0 + j + 1                             # step j + 1's lengths
        times = StepTimes(price.starts[j], price.starts[j + 1], queue_len, used[j])
        return self.results.process_decoded(batch, steps.tokens[j], times, price.graph,
                                            price.padded_batch_size, aborts_pending=aborts_pending,
                                            inflight=inflight)

    def _schedule_steps(self, batch: ScheduleBatch,
                        tokens: np.ndarray) -> tuple[DecodeSteps, list[int]]:
        """The k = len(tokens) > 1 steps of a run (slots allocated for steps 1..k-1 and
        written into req_to_token), and the KV tokens in use after each allocation."""
        n, seq0 = len(tokens) - 1, batch.seq_lens
        more, used = self._alloc_slots(batch, n)                     # [n, B], [n]
        slots = np.concatenate((batch.out_cache_loc[None], more))    # [k, B]
        positions = seq0 - 1 + np.arange(n + 1)[:, None]             # [k, B]
        self.mem.req_to_token_pool.req_to_token[batch.req_pool_indices, positions[1:]] = more
        inputs = np.concatenate((batch.input_ids[None], tokens[:n]))  # [k, B] step j's input
        return DecodeSteps(inputs, positions, slots, tokens), used

    def _alloc_slots(self, batch: ScheduleBatch, k: int) -> tuple[np.ndarray, list[int]]:
        """[k, B] slots as the next k calls of alloc_for_decode would hand them out (for
        positions seq_lens, seq_lens + 1, ...), and the KV tokens in use after each."""
        a, b = self.mem.allocator, len(batch)
        if k == 0:
            return np.zeros((0, b), np.int64), []
        if self.mem.page_size == 1:
            return self._alloc_evicting(b, k)
        table = self.mem.req_to_token_pool.req_to_token
        rows, seq = batch.req_pool_indices, batch.seq_lens
        last = table[rows, seq - 1].astype(np.int64)
        out, used = [], []
        for j in range(k):
            last = a.alloc_decode(seq + j + 1, last)
            out.append(last)
            used.append(a.size - a.available_size())
        return np.stack(out), used

    def _alloc_evicting(self, b: int, k: int) -> tuple[np.ndarray, list[int]]:
        """_alloc_slots at page size 1: before a step finds fewer than B free slots, evict B
        cached tokens (check_decode_mem's eviction); the steps in between take their slots in
        one allocation (FIFO: step j takes the next B free slots)."""
        a, parts, used = self.mem.allocator, [], []
        while k:
            if a.available_size() < b:
                self.mem.tree_cache.evict(b)
            t = min(k, a.available_size() // b)
            if t == 0:
                raise AssertionError("decode run past its KV limit (decode_run_limit)")
            used0 = a.size - a.available_size()
            parts.append(a.alloc(t * b).reshape(t, b))
            used += [used0 + (j + 1) * b for j in range(t)]
            k -= t
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)), used
