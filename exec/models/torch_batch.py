"""`TorchBatch`: the tensors one model forward needs besides input_ids and positions (every
registered model takes it; `exec.runner.model_runner` and the CUDA-graph runner build it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from exec.layers.attention import AttentionMetadata
from exec.memory.kv_pool import KVPool


@dataclass(frozen=True)
class TorchBatch:
    out_cache_loc: torch.Tensor  # [T] int64 KV slot each token writes
    attention: AttentionMetadata
    kv_pool: KVPool
