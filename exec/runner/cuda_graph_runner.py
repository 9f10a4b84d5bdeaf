"""Decode CUDA graphs (semantics §9.2–§9.3), captured lazily per (padded batch size,
key-length bucket) and replayed with the batch copied into their static inputs. Off CUDA
(the conformance kit on CPU) the same static inputs run eagerly at the padded size, so
padding is exercised, and checked against the simulator, without a GPU.

Padding rows follow the spec's `pad_decode_batch`: seq_len 1, request row 0, slot 0, so
they read one key and write only the dummy slot; their logits are sliced away. Keys are
read through a fixed window of `bucket` slots (the next power of two >= the longest
sequence, at least 64), so one graph serves many sequence lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from exec.layers.attention import AttentionGroup, AttentionMetadata
from exec.memory.kv_pool import KVPool
from exec.models import TorchBatch
from shared.batch.cuda_graph import pad_decode_batch, padded_batch_size
from shared.batch.forward_batch import ForwardBatch

MIN_KEY_BUCKET = 64


@dataclass
class CapturedDecode:
    graph: torch.cuda.CUDAGraph | None   # None off CUDA: `run` is called eagerly instead
    input_ids: torch.Tensor      # [bs] int64
    positions: torch.Tensor      # [bs] int64
    out_cache_loc: torch.Tensor  # [bs] int64
    kv_index: torch.Tensor       # [bs, S] int64
    mask: torch.Tensor           # [bs, 1, 1, S] bool
    logits: torch.Tensor         # [bs, V] float32 (output)
    run: Callable[[], torch.Tensor] | None = None
    window_mask: torch.Tensor | None = None   # [bs, 1, 1, S] bool: `mask` within the window

    def replay(self) -> None:
        if self.graph is None:
            self.logits = self.run()
        else:
            self.graph.replay()


class DecodeGraphRunner:
    """Decode forwards replayed from captured graphs, one per (padded batch size, key
    bucket): `model` over `kv_pool` on `device`, keys bucketed up to `context_length`."""

    def __init__(self, model: torch.nn.Module, kv_pool: KVPool, device: torch.device,
                 context_length: int, sizes: list[int], window: int | None = None) -> None:
        self.model, self.kv_pool, self.device = model, kv_pool, device
        self.window = window   # the sliding layers' window (None: no layer slides)
        self.context_length, self.sizes = context_length, sizes
        self.graphs: dict[tuple[int, int], CapturedDecode] = {}
        self.pool = None

    def bucket(self, max_seq: int) -> int:
        return min(max(MIN_KEY_BUCKET, 1 << (max_seq - 1).bit_length()), self.context_length)

    def replay(self, fb: ForwardBatch) -> tuple[torch.Tensor, int]:
        """Logits [B, V] of a decode batch, and the padded batch size it ran at."""
        bs = padded_batch_size(fb.batch_size, self.sizes)
        key = (bs, self.bucket(int(fb.seq_lens.max())))
        g = self.graphs.get(key) or self._capture(*key)
        self._fill(g, fb, bs, key[1])
        g.replay()
        return g.logits[: fb.batch_size].clone(), bs

    def _fill(self, g: CapturedDecode, fb: ForwardBatch, bs: int, window: int) -> None:
        p = pad_decode_batch(fb, bs)
        keys = np.arange(window)
        table = fb.req_to_token[p.req_pool_indices[:, None], keys[None, :]]   # [bs, S]
        valid = keys[None, :] < p.seq_lens[:, None]                           # [bs, S]
        dev = g.input_ids.device
        for dst, src in ((g.input_ids, p.input_ids), (g.positions, p.positions),
                         (g.out_cache_loc, p.out_cache_loc),
                         (g.kv_index, np.where(valid, table, 0).astype(np.int64))):
            dst.copy_(torch.from_numpy(np.ascontiguousarray(src)).to(dev))
        g.mask.copy_(torch.from_numpy(valid[:, None, None, :]).to(dev))
        if g.window_mask is not None:   # NOTE: padding rows (seq_len 1) keep their one key
            near = valid & (keys[None, :] > p.seq_lens[:, None] - 1 - self.window)
            g.window_mask.copy_(torch.from_numpy(near[:, None, None, :]).to(dev))

    def _capture(self, bs: int, window: int) -> CapturedDecode:
        dev = self.device
        zeros = lambda *shape: torch.zeros(shape, dtype=torch.int64, device=dev)  # noqa: E731
        mask = torch.zeros((bs, 1, 1, window), dtype=torch.bool, device=dev)
        mask[..., 0] = True
        cuda = dev.type == "cuda"
        g = CapturedDecode(torch.cuda.CUDAGraph() if cuda else None, zeros(bs), zeros(bs),
                           zeros(bs), zeros(bs, window), mask, torch.empty(0),
                           window_mask=None if self.window is None else mask.clone())
        meta = AttentionMetadata((AttentionGroup(g.kv_index, g.mask, torch.arange(bs, device=dev)[:, None],
                                                 torch.arange(bs, device=dev),
                                                 window_mask=g.window_mask),))
        batch = TorchBatch(g.out_cache_loc, meta, self.kv_pool)
        g.run = lambda: self.model.compute_logits(self.model(g.input_ids, g.positions, batch))
        if cuda:
            self._record(g)
        self.graphs[(bs, window)] = g
        return g

    def _record(self, g: CapturedDecode) -> None:
        """Warm up on a side stream, then capture `g.run` into `g.graph`."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            g.run()  # warm-up outside the graph
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(g.graph, pool=self.pool):
            g.logits = g.run()
        self.pool = g.graph.pool()
