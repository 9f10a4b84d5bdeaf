"""`DecodeBlock`: k consecutive decode steps of one unchanged batch (a decode run), recorded
as one value instead of k `StepValues`.

A `Trace` takes a block as its steps (`steps()`: the k StepValues, field for field what
recording each step alone gives); a `RunLog` keeps the block and reads its token times
from the [k, B] arrays directly (`token_columns`), building the steps only when it keeps
a step table or prices bounds. Either way the records are those of k single steps.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from shared.trace.step_record import StepValues


class DecodeBlock(NamedTuple):
    """Step j (0 <= j < k) is step number `first_step + j`, from starts[j] to starts[j + 1]
    with kv_used[j] KV tokens in use; every decode step of the batch samples each row."""

    first_step: int
    rids: tuple[str, ...]
    inputs: np.ndarray            # [k, B] step j's input ids
    positions: np.ndarray         # [k, B] the position each request writes in step j
    slots: np.ndarray             # [k, B] the KV slot it writes (out_cache_loc)
    tokens: np.ndarray            # [k, B] the ids sampled in step j
    req_pool_indices: np.ndarray  # [B]
    rows: np.ndarray              # [B] arange(B): pruned_rows and sample_indices (read-only)
    empty: np.ndarray             # [0] the extend fields of a decode step (read-only)
    starts: list[float]           # [k + 1]
    kv_used: list[int]            # [k]
    graph: bool
    padded_batch_size: int
    queue_len: int

    @property
    def num_steps(self) -> int:
        return len(self.tokens)

    def steps(self) -> list[StepValues]:
        """The k steps as StepValues, as each would be recorded alone."""
        rows, empty, starts = self.rows, self.empty, self.starts
        seq_lens = self.positions + 1                                    # [k, B]
        return [StepValues(
            step=self.first_step + j, forward_mode="DECODE", rids=self.rids,
            input_ids=self.inputs[j], positions=self.positions[j], out_cache_loc=self.slots[j],
            req_pool_indices=self.req_pool_indices, seq_lens=seq_lens[j],
            extend_prefix_lens=empty, extend_seq_lens=empty, extend_start_loc=empty,
            extend_logprob_start_lens=empty, pruned_rows=rows, sample_indices=rows,
            next_token_ids=self.tokens[j], graph=self.graph,
            padded_batch_size=self.padded_batch_size, start_time=starts[j],
            duration=starts[j + 1] - starts[j], queue_len=self.queue_len,
            kv_used_tokens=self.kv_used[j]) for j in range(len(self.tokens))]

    def shape_columns(self) -> tuple[list[list], list[float]]:
        """Per step its SHAPE_FIELDS (one list each, as `steps()` holds them) and duration."""
        k, starts = len(self.tokens), self.starts
        return ([["DECODE"] * k, list(self.positions + 1), [self.empty] * k, [self.rows] * k,
                 [self.padded_batch_size] * k, list(self.inputs)],
                [starts[j + 1] - starts[j] for j in range(k)])

    def token_columns(self) -> tuple[tuple, np.ndarray, list[float], list[float]]:
        """Per step its rids and start time and duration (as `steps()` holds them), and the
        [k * B] ids sampled, step after step."""
        starts = self.starts
        durations = [b - a for a, b in itertools.pairwise(starts)]
        return (self.rids,) * len(durations), self.tokens.ravel(), starts[:-1], durations
