"""Decode CUDA-graph batch sizes, padding and the graph-or-eager decision (semantics §9.2–§9.3)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shared.config.engine_config import DEFAULT_CUDA_GRAPH_MAX_BS

if TYPE_CHECKING:
    from shared.batch.forward_batch import ForwardBatch
    from shared.config.engine_config import EngineConfig



def cuda_graph_batch_sizes(config: EngineConfig) -> list[int]:
    """The captured decode batch sizes: [1, 2, 4, 8, 12], 16..256 step 8, 272..<512 step 16,
    512.. step 32, capped at cuda_graph_max_bs (which is included) and at
    max_running_requests. Empty when graphs are disabled."""
    if config.disable_cuda_graph:
        return []
    max_bs = config.cuda_graph_max_bs or DEFAULT_CUDA_GRAPH_MAX_BS
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = sorted({s for s in sizes if s <= max_bs} | {max_bs})
    if config.max_running_requests is not None:
        sizes = [s for s in sizes if s <= config.max_running_requests]
    return sizes


def padded_batch_size(bs: int, sizes: Sequence[int]) -> int:
    """The smallest captured size >= bs; bs itself when none is (the eager path)."""
    i = bisect.bisect_left(sizes, bs)
    return sizes[i] if i < len(sizes) else bs


def can_run_graph(forward_batch: ForwardBatch, sizes: Sequence[int]) -> bool:
    """A decode batch no larger than the largest captured size replays a graph."""
    return forward_batch.forward_mode.is_cuda_graph() and graph_fits(forward_batch.batch_size, sizes)


def graph_fits(batch_size: int, sizes: Sequence[int]) -> bool:
    """Some captured size holds `batch_size` rows (the decision for a decode batch)."""
    return bool(sizes) and 0 < batch_size <= sizes[-1]


class PaddedDecode(NamedTuple):
    """A decode batch padded to a captured size. Padding rows read one token (seq_len 1)
    through request row 0 and write their K/V to the reserved slot 0; their outputs are
    discarded."""

    input_ids: np.ndarray         # [bs] int64
    req_pool_indices: np.ndarray  # [bs] int64
    seq_lens: np.ndarray          # [bs] int64
    out_cache_loc: np.ndarray     # [bs] int64
    positions: np.ndarray         # [bs] int64


def pad_decode_batch(forward_batch: ForwardBatch, bs: int) -> PaddedDecode:
    """The batch's decode arrays padded with (token 0, row 0, seq_len 1, slot 0, position 0)."""
    fb, pad = forward_batch, bs - forward_batch.batch_size
    if pad < 0:
        raise ValueError(f"cannot pad a batch of {fb.batch_size} down to {bs}")
    fill = {"input_ids": 0, "req_pool_indices": 0, "seq_lens": 1, "out_cache_loc": 0, "positions": 0}
    return PaddedDecode(**{name: np.concatenate((getattr(fb, name), np.full(pad, v, np.int64)))
                           for name, v in fill.items()})
