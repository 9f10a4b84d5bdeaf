"""`compute_positions`: the position of every token of an extend batch (semantics §8.3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Positions(NamedTuple):
    positions: np.ndarray         # [T] int64: prefix_i + arange(extend_i), per request
    extend_start_loc: np.ndarray  # [B] int64: exclusive cumsum of extend_seq_lens


def compute_positions(
    extend_prefix_lens: Sequence[int] | np.ndarray, extend_seq_lens: Sequence[int] | np.ndarray
) -> Positions:
    """Positions restart at each request's prefix length; they are not batch-global.
    A decode batch is the case prefix = seq_lens - 1, extend = 1."""
    pre = np.asarray(extend_prefix_lens, dtype=np.int64)
    ext = np.asarray(extend_seq_lens, dtype=np.int64)
    if pre.shape != ext.shape:
        raise ValueError(f"compute_positions: {len(pre)} prefix lengths for {len(ext)} extend lengths")
    if len(ext) == 1:  # one request (a common prefill): its positions directly
        p = int(pre[0])
        return Positions(np.arange(p, p + int(ext[0]), dtype=np.int64), np.zeros(1, np.int64))
    ends = ext.cumsum()                                            # [B]
    start = ends - ext                                             # [B]
    total = int(ends[-1]) if len(ends) else 0
    positions = np.arange(total, dtype=np.int64) + (pre - start).repeat(ext)  # [T]
    return Positions(positions, start)
