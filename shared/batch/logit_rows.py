"""`select_logit_rows`: which hidden rows become logits (semantics §10.2).

Without input logprobs each request keeps its last row: `cumsum(extend_seq_lens) - 1`.
With them, request i keeps rows [start_i, ext_i) of its extend, where start_i is its
logprob start moved back one when it equals ext_i (a request always needs one row to
sample from). `sample_indices` and `input_logprob_indices` index `pruned_rows`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class LogitRows(NamedTuple):
    """NOTE: pruned_rows and sample_indices strictly increase (a request's rows, requests
    in batch order), so R == T or B == R means the identity."""

    pruned_rows: np.ndarray            # [R] int64 indices into the T hidden rows
    sample_indices: np.ndarray         # [B] int64 indices into pruned_rows
    input_logprob_indices: np.ndarray  # [L] int64 indices into pruned_rows


def decode_logit_rows(batch_size: int) -> LogitRows:
    """A decode batch's rows: every request's one token becomes logits and is sampled."""
    rows = np.arange(batch_size, dtype=np.int64)
    return LogitRows(rows, rows, np.zeros(0, np.int64))


@functools.lru_cache(maxsize=1024)
def recorded_decode_rows(batch_size: int) -> LogitRows:
    """decode_logit_rows, one shared read-only instance per size, for records that only
    read them (the trace of a decode step). NOTE: never hand these to a runner (torch
    warns on read-only arrays)."""
    rows = decode_logit_rows(batch_size)
    for a in rows:
        a.flags.writeable = False
    return rows


def _ragged_arange(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """concat_i arange(starts_i, starts_i + counts_i)."""
    offsets = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts - offsets, counts)


def select_logit_rows(
    extend_seq_lens: Sequence[int] | np.ndarray,
    extend_logprob_start_lens: Sequence[int] | np.ndarray | None = None,
) -> LogitRows:
    ext = np.asarray(extend_seq_lens, dtype=np.int64)
    ends = ext.cumsum()
    if extend_logprob_start_lens is None:
        return LogitRows(ends - 1, np.arange(len(ext), dtype=np.int64), np.zeros(0, np.int64))
    s = np.asarray(extend_logprob_start_lens, dtype=np.int64)
    if s.shape != ext.shape:
        raise ValueError(f"select_logit_rows: {len(s)} logprob starts for {len(ext)} requests")
    if np.any((s < 0) | (s > ext)) or np.any(ext < 1):
        raise ValueError("select_logit_rows: need 0 <= logprob start <= extend length, extend >= 1")
    start = np.where(s == ext, s - 1, s)
    count = ext - start                                            # [B] rows kept per request
    pruned = _ragged_arange(ends - ext + start, count)             # [R]
    first = np.cumsum(count) - count                               # [B] slice start in pruned
    return LogitRows(pruned, first + count - 1, _ragged_arange(first, ext - s))
