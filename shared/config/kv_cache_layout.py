"""`KVCacheLayout`: what the paged KV cache stores per token, for both executors: per-head
K and V for standard attention, the compressed latent plus the rotary key for MLA (one
vector per layer, shared by all heads). KV capacity in tokens is bytes / `bytes_per_token`,
computed here once (exec sizes its pool with it; sim prices KV reads and sizes its pool).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config.hf_config import HFConfig


@dataclass(frozen=True)
class KVCacheLayout:
    num_layers: int
    num_vectors: int       # vectors stored per token and layer: 2 * kv heads (K, V), 1 for MLA
    vector_dim: int        # head_dim, or kv_lora_rank + qk_rope_head_dim for MLA
    dtype_bytes: int       # bytes per stored value (2 for bf16, 1 for fp8)

    @classmethod
    def of(cls, config: HFConfig, dtype_bytes: int, tp_size: int = 1) -> KVCacheLayout:
        """The layout of `config` stored at `dtype_bytes` per value on one of `tp_size`
        ranks (KV heads split over ranks, replicated when fewer than ranks; MLA's latent
        is replicated on every rank)."""
        if config.mla is not None:
            return cls(config.num_layers, 1, config.mla.cache_dim, dtype_bytes)
        heads = max(1, config.num_kv_heads // tp_size)
        return cls(config.num_layers, 2 * heads, config.head_dim, dtype_bytes)

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token's cache entry takes over all layers."""
        return self.num_layers * self.num_vectors * self.vector_dim * self.dtype_bytes

    def tokens_in(self, nbytes: int) -> int:
        """How many tokens `nbytes` of cache hold."""
        return int(nbytes // self.bytes_per_token)
