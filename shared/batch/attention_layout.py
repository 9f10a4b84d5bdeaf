"""The padded attention layout of batchtwin's torch executor, and the work it implies.

exec computes attention with dense batched matmuls (torch SDPA), not varlen kernels: the
requests of a batch are grouped by extend length, ceil(log2(extend_len)) (one-token rows
alone, then 2, 3-4, 5-8, ... tokens), and each group is laid out as [B, L_max] queries
against [B, S_max] keys. A decode row next to long sequences therefore reads S_max keys.

The rule lives here, with the spec, because two executors depend on it: exec builds its
attention metadata from `attention_groups`, and the simulator's calibrated cost model prices
`padded_attention_work` so that it predicts what exec actually computes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class PaddedAttentionWork(NamedTuple):
    gathered_keys: int      # sum over groups of B * S_max: KV rows read per layer and KV head
    padded_pairs: int       # sum over groups of B * L_max * S_max: scored query-key pairs


def attention_groups(extend_lens: np.ndarray) -> list[np.ndarray]:
    """Request indices of each group (groups in increasing extend length), [B] -> list."""
    bucket = np.ceil(np.log2(np.asarray(extend_lens, dtype=np.int64))).astype(np.int64)
    kinds = np.unique(bucket)
    if len(kinds) == 1:
        return [np.arange(len(bucket))]
    return [np.flatnonzero(bucket == k) for k in kinds]


def padded_attention_work(seq_lens: np.ndarray, extend_lens: np.ndarray) -> PaddedAttentionWork:
    seq, ext = np.asarray(seq_lens, dtype=np.int64), np.asarray(extend_lens, dtype=np.int64)
    keys = pairs = 0
    for g in attention_groups(ext):
        rows, s_max, l_max = len(g), int(seq[g].max()), int(ext[g].max())
        keys += rows * s_max
        pairs += rows * l_max * s_max
    return PaddedAttentionWork(keys, pairs)
