"""`ExtendSteps`: many extend (EXTEND, MIXED) steps of a trace, column by column, and
`StepTotals`: the BatchShape totals of many steps as arrays, what a cost model needs to
bound them together (`CostModel.extend_step_bounds`) without building a shape per step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from shared.batch.forward_mode import ForwardMode
from sim.cost.batch_shape import BatchShape


class StepTotals(NamedTuple):
    """[N] int64 arrays, the totals of N steps as their BatchShapes give them (padding
    rows included)."""

    rows: np.ndarray             # BatchShape.rows
    kv_tokens: np.ndarray        # BatchShape.kv_tokens
    attention_pairs: np.ndarray  # BatchShape.attention_pairs
    lm_head_rows: np.ndarray     # BatchShape.padded_lm_head_rows


class ExtendSteps(NamedTuple):
    """N extend steps, per step: its mode, per request its seq and cached-prefix lengths,
    its LM-head (pruned) rows, padded batch size (>= its batch size) and token rows. Trusted:
    the steps of a trace this process recorded (as `BatchShape.extend_trusted`)."""

    modes: Sequence[ForwardMode]
    seq_lens: Sequence[Sequence[int]]
    prefix_lens: Sequence[Sequence[int]]
    lm_head_rows: Sequence[int]
    padded: Sequence[int]
    num_tokens: Sequence[int]

    def shapes(self) -> Iterator[BatchShape]:
        """Each step's BatchShape, in order."""
        for mode, seq, prefix, lm_rows, padded, tokens in zip(*self, strict=True):
            yield BatchShape.extend_trusted(mode, list(seq), list(prefix), lm_rows, padded,
                                            tokens)

    def totals(self) -> StepTotals:
        """The steps' totals over arrays (the same integers as their shapes' properties)."""
        n = len(self.seq_lens)
        b = np.fromiter(map(len, self.seq_lens), np.int64, n)               # [N]
        seq, prefix = flatten(self.seq_lens), flatten(self.prefix_lens)     # [sum B]
        extend = seq - prefix
        pairs = extend * prefix + extend * (extend + 1) // 2
        pad = np.asarray(self.padded, np.int64) - b
        return StepTotals(np.asarray(self.num_tokens, np.int64) + pad,
                          segment_sums(seq, b) + pad, segment_sums(pairs, b) + pad,
                          np.asarray(self.lm_head_rows, np.int64) + pad)


def flatten(lists: Sequence[Sequence[int]]) -> np.ndarray:
    """[sum of lengths] int64: the lists one after another (empty ones included)."""
    # NOTE: an empty list reads as float64: unsafe casting keeps the integers exact.
    return np.concatenate([np.zeros(0, np.int64), *lists], dtype=np.int64, casting="unsafe")


def segment_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[N] sums of consecutive segments of `values` of `lengths` (a segment may be empty)."""
    ends = np.cumsum(lengths)
    totals = np.concatenate(([0], np.cumsum(values)))
    return totals[ends] - totals[ends - lengths]
