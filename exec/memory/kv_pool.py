"""The paged KV cache tensors (semantics §3.2), holding what the architecture caches
(`shared.config.kv_cache_layout.KVCacheLayout`, which also sizes the pool in bytes):

- `KVPool`: per-head K and V, `[layers, slots + page_size, kv_heads, head_dim]` each;
- `LatentKVPool`: MLA's compressed latent and rotary key, `[layers, slots + page_size,
  kv_lora_rank + qk_rope_head_dim]`, one vector per token shared by every head.

Slot 0 (page 0) is the dummy that padding rows write to; the allocator never hands it out.
`k_layers[i]` / `v_layers[i]` / `latent_layers[i]` are layer i's views. The storage dtype may
be narrower than the model's (`exec.memory.kv_cache_dtype`: fp8): writes divide by the layer's
per-tensor scale (1.0 unless a checkpoint gives one) and cast to it; readers cast back to the
model dtype and multiply by the scale (`exec.layers.attention.paged_attention`'s k_scale / v_scale).
`storage` lists the tensors (`exec.runner.spec_probe` diffs them to see which slots a forward wrote).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Sequence

import torch

from exec.memory.kv_cache_dtype import dtype_bytes
from shared.config.hf_config import HFConfig
from shared.config.kv_cache_layout import KVCacheLayout


def _scales(scales: Sequence[float] | None, num_layers: int) -> tuple[float, ...]:
    return (1.0,) * num_layers if scales is None else tuple(float(s) for s in scales)


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """A zero tensor; on CPU over an anonymous mmap, whose pages the OS zero-fills when first
    touched. NOTE: torch.zeros writes every page up front: seconds and the whole pool's
    resident memory for the default CPU pool (a fifth of the host), of which a short run
    touches a few pages. The tensor keeps the mapping alive."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * dtype_bytes(dtype)
    return torch.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=torch.uint8)[:nbytes] \
        .view(dtype).view(shape)


def _put(view: torch.Tensor, loc: torch.Tensor, x: torch.Tensor, scale: float) -> None:
    """NOTE: index_put_ on the layer's own view: under torch.compile it stays in place,
    where index_copy_ (or a write through `pool[layer]`) is functionalised into a copy of the
    whole layer (or pool) every step."""
    view.index_put_((loc,), (x if scale == 1.0 else x / scale).to(view.dtype))


class KVPool:
    def __init__(self, num_layers: int, num_slots: int, page_size: int, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str | torch.device, *,
                 k_scales: Sequence[float] | None = None,
                 v_scales: Sequence[float] | None = None) -> None:
        shape = (num_layers, num_slots + page_size, kv_heads, head_dim)
        self.k = _zeros(shape, dtype, device)
        self.v = _zeros(shape, dtype, device)
        self.k_layers, self.v_layers = self.k.unbind(0), self.v.unbind(0)
        self.k_scale, self.v_scale = _scales(k_scales, num_layers), _scales(v_scales, num_layers)

    @property
    def storage(self) -> tuple[torch.Tensor, ...]:
        return self.k, self.v

    def write(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """loc: [T] slots; k, v: [T, kv_heads, head_dim]."""
        _put(self.k_layers[layer], loc, k, self.k_scale[layer])
        _put(self.v_layers[layer], loc, v, self.v_scale[layer])


class LatentKVPool:
    def __init__(self, num_layers: int, num_slots: int, page_size: int, cache_dim: int,
                 dtype: torch.dtype, device: str | torch.device, *,
                 scales: Sequence[float] | None = None) -> None:
        self.latent = _zeros((num_layers, num_slots + page_size, cache_dim), dtype, device)
        self.latent_layers = self.latent.unbind(0)
        self.scale = _scales(scales, num_layers)

    @property
    def storage(self) -> tuple[torch.Tensor, ...]:
        return (self.latent,)

    def write(self, layer: int, loc: torch.Tensor, latent: torch.Tensor) -> None:
        """loc: [T] slots; latent: [T, cache_dim] (normed kv latent | rotated k_pe)."""
        _put(self.latent_layers[layer], loc, latent, self.scale[layer])


def make_kv_pool(config: HFConfig, num_slots: int, page_size: int, dtype: torch.dtype,
                 device: str | torch.device) -> KVPool | LatentKVPool:
    """The pool `config`'s attention caches, storing `dtype`: shaped by its KVCacheLayout."""
    layout = KVCacheLayout.of(config, dtype_bytes(dtype))
    if config.mla is not None:
        return LatentKVPool(layout.num_layers, num_slots, page_size, layout.vector_dim, dtype, device)
    return KVPool(layout.num_layers, num_slots, page_size, layout.num_vectors // 2,
                  layout.vector_dim, dtype, device)


def kv_pool_nbytes(config: HFConfig, num_slots: int, page_size: int, dtype: torch.dtype) -> int:
    """Bytes the tensors of `make_kv_pool(config, num_slots, page_size, dtype, ...)` take."""
    return (num_slots + page_size) * KVCacheLayout.of(config, dtype_bytes(dtype)).bytes_per_token
