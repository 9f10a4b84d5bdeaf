"""`KVPool`: the paged KV cache tensors (semantics §3.2).

K and V are `[layers, slots + page_size, kv_heads, head_dim]`: slot 0 (page 0) is the
dummy that padding rows write to; the allocator never hands it out. `k_layers[i]` /
`v_layers[i]` are layer i's views `[slots + page_size, kv_heads, head_dim]`.
"""

from __future__ import annotations

import torch


class KVPool:
    def __init__(self, num_layers: int, num_slots: int, page_size: int, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str | torch.device) -> None:
        shape = (num_layers, num_slots + page_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.k_layers, self.v_layers = self.k.unbind(0), self.v.unbind(0)

    @staticmethod
    def bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()

    @staticmethod
    def nbytes(num_layers: int, num_slots: int, page_size: int, kv_heads: int, head_dim: int,
               dtype: torch.dtype) -> int:
        """Bytes the K and V tensors of `KVPool(num_layers, num_slots, page_size, ...)` take."""
        return (num_slots + page_size) * KVPool.bytes_per_token(num_layers, kv_heads, head_dim, dtype)

    def write(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """loc: [T] slots; k, v: [T, kv_heads, head_dim].

        NOTE: index_put_ on the layer's own view: under torch.compile it stays in place,
        where index_copy_ (or a write through `self.k[layer]`) is functionalised into a copy
        of the whole layer (or pool) every step."""
        self.k_layers[layer].index_put_((loc,), k.to(self.k.dtype))
        self.v_layers[layer].index_put_((loc,), v.to(self.v.dtype))
