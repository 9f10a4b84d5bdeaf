"""Attention over the paged KV cache, with torch SDPA (no custom kernels).

Each request's queries attend to its own history only, read through its `req_to_token`
row: the batch is laid out as B padded query blocks [B, L] against B padded key blocks
[B, S], with a mask allowing key s for query l of request b iff s <= position of l.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AttentionMetadata:
    """Built once per forward on the host, shared by every layer."""

    kv_index: torch.Tensor   # [B, S] int64 KV slot of key s of request b (0 past seq_len)
    mask: torch.Tensor       # [B, 1, L, S] bool: query l of request b may attend key s
    q_index: torch.Tensor    # [B, L] int64 token row of query l of request b (0 for padding)
    out_index: torch.Tensor  # [T] int64 row of each token in the flattened [B * L] output

    @classmethod
    def build(cls, req_to_token: np.ndarray, req_pool_indices: np.ndarray, seq_lens: np.ndarray,
              prefix_lens: np.ndarray, extend_lens: np.ndarray, device: torch.device) -> AttentionMetadata:
        """Decode is the case prefix = seq_len - 1, extend = 1."""
        seq, pre, ext = (np.asarray(a, dtype=np.int64) for a in (seq_lens, prefix_lens, extend_lens))
        s_max, l_max = int(seq.max()), int(ext.max())
        keys, queries = np.arange(s_max), np.arange(l_max)
        table = req_to_token[np.asarray(req_pool_indices)[:, None], keys[None, :]]   # [B, S]
        kv_index = np.where(keys[None, :] < seq[:, None], table, 0)
        q_ok = queries[None, :] < ext[:, None]                                      # [B, L]
        q_pos = pre[:, None] + queries[None, :]                                     # [B, L]
        mask = (keys[None, None, :] <= q_pos[:, :, None]) & q_ok[:, :, None]        # [B, L, S]
        mask[..., 0] |= ~q_ok  # padding queries see one key, so no row is fully masked
        start = np.cumsum(ext) - ext
        q_index = np.where(q_ok, start[:, None] + queries[None, :], 0)
        out_index = np.flatnonzero(q_ok.reshape(-1))
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        return cls(to(kv_index.astype(np.int64)), to(mask[:, None]), to(q_index), to(out_index))


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: [T, H, D]; k_cache, v_cache: [slots, H_kv, D] (this layer). Returns [T, H, D]."""
    b, l_max = meta.q_index.shape
    s_max = meta.kv_index.shape[1]
    if l_max == 1 and b == q.shape[0]:  # decode: one query per request, in request order
        qp = q.view(b, 1, *q.shape[1:]).transpose(1, 2)                    # [B, H, 1, D]
    else:
        qp = _rows(q, meta.q_index.view(-1)).view(b, l_max, *q.shape[1:]).transpose(1, 2)  # [B, H, L, D]
    flat = meta.kv_index.view(-1)
    k = _rows(k_cache, flat).view(b, s_max, *k_cache.shape[1:]).transpose(1, 2)  # [B, H_kv, S, D]
    v = _rows(v_cache, flat).view(b, s_max, *v_cache.shape[1:]).transpose(1, 2)  # [B, H_kv, S, D]
    if l_max == 1:
        out = _single_query_attention(qp, k, v, meta.mask, scale)           # [B, H, 1, D]
    else:
        out = F.scaled_dot_product_attention(qp, k, v, attn_mask=meta.mask, scale=scale,
                                             enable_gqa=qp.shape[1] != k.shape[1])  # [B, H, L, D]
    out = out.transpose(1, 2).reshape(b * l_max, q.shape[1], q.shape[2])
    return out if b * l_max == q.shape[0] else _rows(out, meta.out_index)  # [T, H, D]


def _single_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                            scale: float) -> torch.Tensor:
    """Decode attention (one query per request) as two grouped matmuls with an fp32
    softmax. NOTE: CPU SDPA is ~10x slower than this in bf16 for one query row.
    q: [B, H, 1, D]; k, v: [B, H_kv, S, D]; mask: [B, 1, 1, S]."""
    b, h, _, d = q.shape
    groups = q.view(b, k.shape[1], h // k.shape[1], d)                    # [B, H_kv, G, D]
    scores = torch.matmul(groups, k.transpose(-1, -2)).float() * scale     # [B, H_kv, G, S]
    scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), v)       # [B, H_kv, G, D]
    return out.view(b, h, 1, d)


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[index] along dim 0 (index_select: several times faster than advanced indexing)."""
    return x.index_select(0, index)
