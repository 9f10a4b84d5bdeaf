"""`StepRecorder`: the one by-name path from a processed forward to the trace's step records.

Both a single step (`BatchResultProcessor`) and a decode run's steps (`shared.loop.decode_run`)
are recorded here, as `StepValues` (StepRecord's fields by name), a run's steps as one
`DecodeBlock`, numbered in order from the trace's length. The recorder owns no scheduler state: what a record needs that the batch
does not hold (times, the queue length, the KV in use) comes in as arguments.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shared.batch.logit_rows import LogitRows, recorded_decode_rows
from shared.batch.schedule_batch import ScheduleBatch
from shared.memory.kv_memory import KVMemory
from shared.trace.decode_block import DecodeBlock
from shared.trace.step_record import StepValues, TokenStep
from shared.trace.trace import Trace

_EMPTY = np.zeros(0, np.int64)


class StepTimes(NamedTuple):
    """Where a step stood when it ran: its start and end, and what the trace observes then."""

    start: float
    end: float
    queue_len: int           # requests waiting
    kv_used: int | None      # KV tokens in use; None: read when the step is recorded


class DecodeSteps(NamedTuple):
    """k consecutive decode steps of one batch (a decode run), [k, B] each."""

    inputs: np.ndarray       # step j's input ids
    positions: np.ndarray    # the position each request writes in step j
    slots: np.ndarray        # the KV slot it writes (out_cache_loc)
    tokens: np.ndarray       # the ids sampled in step j


class StepRecorder:
    """Appends steps to `trace`; the KV in use, when not observed earlier, is read from
    `mem` at recording time."""

    def __init__(self, trace: Trace, mem: KVMemory) -> None:
        self.trace = trace
        self.mem = mem

    def record(self, batch: ScheduleBatch, rows: LogitRows, graph: bool | None,
               padded_batch_size: int | None, next_token_ids: np.ndarray, times: StepTimes,
               discarded: np.ndarray | None) -> None:
        """Record the step `batch` ran: its logit `rows`, the ids kept (-1 for a discarded
        row) and the rows `discarded` ([B] bool) under overlap (None: none); for a log
        that keeps no steps, only what it reads (`TokenStep`)."""
        extend = batch.forward_mode.is_extend()
        if not self.trace.keeps_steps:
            self.trace.append_token_step(TokenStep(
                batch.rids, next_token_ids, times.start, times.end - times.start,
                batch.forward_mode.name, batch.seq_lens, batch.prefix_lens if extend else _EMPTY,
                rows.pruned_rows, padded_batch_size or len(batch), batch.input_ids))
            return
        pos = batch.positions()
        used = self.mem.kv_used() if times.kv_used is None else times.kv_used
        self.trace.append_step_values(StepValues(
            step=len(self.trace), forward_mode=batch.forward_mode.name, rids=batch.rids,
            input_ids=batch.input_ids, positions=pos.positions, out_cache_loc=batch.out_cache_loc,
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens,
            extend_prefix_lens=batch.prefix_lens if extend else _EMPTY,
            extend_seq_lens=batch.extend_lens if extend else _EMPTY,
            extend_start_loc=pos.extend_start_loc if extend else _EMPTY,
            extend_logprob_start_lens=batch.extend_logprob_start_lens if extend else _EMPTY,
            pruned_rows=rows.pruned_rows, sample_indices=rows.sample_indices,
            next_token_ids=next_token_ids, graph=bool(graph),
            padded_batch_size=padded_batch_size or len(batch), start_time=times.start,
            duration=times.end - times.start, queue_len=times.queue_len, kv_used_tokens=used,
            overlap_rows=() if discarded is None else tuple(np.flatnonzero(discarded).tolist())))

    def record_decode_steps(self, batch: ScheduleBatch, steps: DecodeSteps, kv_used: list[int],
                            starts: list[float], graph: bool, padded_batch_size: int,
                            queue_len: int) -> None:
        """Record k = len(steps.tokens) decode steps of `batch`, step j from starts[j] to
        starts[j + 1] with kv_used[j] tokens in use, as one `DecodeBlock`."""
        rows, _, empty = recorded_decode_rows(len(batch))
        k = len(steps.tokens)
        self.trace.append_decode_block(DecodeBlock(
            len(self.trace), batch.rids, steps.inputs, steps.positions, steps.slots, steps.tokens,
            batch.req_pool_indices, rows, empty, starts[:k + 1], kv_used[:k], graph,
            padded_batch_size, queue_len))
