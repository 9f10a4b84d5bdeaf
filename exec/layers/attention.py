"""Attention over the paged KV cache, with torch SDPA (no custom kernels).

Each request's queries attend to its own history only, read through its `req_to_token`
row: the batch is laid out as B padded query blocks [B, L] against B padded key blocks
[B, S], with a mask allowing key s for query l of request b iff s <= position of l.
Sliding-window layers (gpt-oss) use a second mask that also requires position of l - s <
window; the KV pool keeps every layer's whole history. Attention sinks (gpt-oss: one
learned logit per query head that joins the softmax without a value) run the two-matmul
path, which takes them as one more column of the scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from shared.batch.attention_layout import attention_groups


@dataclass(frozen=True)
class AttentionGroup:
    """Requests laid out as padded blocks: [B, L] queries against [B, S] keys."""

    kv_index: torch.Tensor   # [B, S] int64 KV slot of key s of request b (0 past seq_len)
    mask: torch.Tensor       # [B, 1, L, S] bool: query l of request b may attend key s
    q_index: torch.Tensor    # [B, L] int64 token row of query l of request b (0 for padding)
    out_index: torch.Tensor  # [N] int64 row of each real token in the flattened [B * L] output
    token_rows: torch.Tensor | None = None  # [N] rows of q these are; None: all rows, in order
    window_mask: torch.Tensor | None = None  # [B, 1, L, S] bool: `mask` within the window

    @classmethod
    def build(cls, table: np.ndarray, seq: np.ndarray, pre: np.ndarray, ext: np.ndarray,
              start: np.ndarray, device: torch.device, whole: bool,
              window: int | None = None) -> AttentionGroup:
        """`table`: the requests' req_to_token rows; `start`: each request's first token row;
        `window`: the sliding layers' window (None: no window mask)."""
        s_max, l_max = int(seq.max()), int(ext.max())
        keys, queries = np.arange(s_max), np.arange(l_max)
        kv_index = np.where(keys[None, :] < seq[:, None], table[:, :s_max], 0)      # [B, S]
        q_ok = queries[None, :] < ext[:, None]                                      # [B, L]
        q_pos = pre[:, None] + queries[None, :]                                     # [B, L]
        mask = (keys[None, None, :] <= q_pos[:, :, None]) & q_ok[:, :, None]        # [B, L, S]
        near = None if window is None else mask & (keys[None, None, :] > q_pos[:, :, None] - window)
        for m in (mask, near):
            if m is not None:
                m[..., 0] |= ~q_ok  # padding queries see one key, so no row is fully masked
        q_index = np.where(q_ok, start[:, None] + queries[None, :], 0)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        return cls(to(kv_index.astype(np.int64)), to(mask[:, None]), to(q_index),
                   to(np.flatnonzero(q_ok.reshape(-1))), None if whole else to(q_index[q_ok]),
                   None if near is None else to(near[:, None]))

    def mask_of(self, sliding: bool) -> torch.Tensor:
        """The mask a layer uses: the window's for a sliding layer, when there is one."""
        return self.window_mask if sliding and self.window_mask is not None else self.mask


@dataclass(frozen=True)
class AttentionMetadata:
    """Built once per forward on the host, shared by every layer.

    NOTE: one padded block costs B * L_max * S_max; a batch mixing one-token rows (decodes)
    with long extends would pad every decode to the longest extend. So requests are grouped
    by extend length (`shared.batch.attention_layout.attention_groups`: decodes alone, then 2,
    3-4, 5-8, ... tokens), and each group is padded on its own: padding at most doubles a
    query block. The calibrated cost model prices exactly this layout."""

    groups: tuple[AttentionGroup, ...]

    @classmethod
    def build(cls, req_to_token: np.ndarray, req_pool_indices: np.ndarray, seq_lens: np.ndarray,
              prefix_lens: np.ndarray, extend_lens: np.ndarray, device: torch.device,
              window: int | None = None) -> AttentionMetadata:
        """Decode is the case prefix = seq_len - 1, extend = 1. `window`: the model's
        sliding-layer window (`HFConfig.layer_window`), None when no layer slides."""
        seq, pre, ext = (np.asarray(a, dtype=np.int64) for a in (seq_lens, prefix_lens, extend_lens))
        keys = np.arange(int(seq.max()))
        table = req_to_token[np.asarray(req_pool_indices)[:, None], keys[None, :]]   # [B, S]
        start = np.cumsum(ext) - ext
        groups = attention_groups(ext)
        if len(groups) == 1:
            return cls((AttentionGroup.build(table, seq, pre, ext, start, device, whole=True,
                                             window=window),))
        return cls(tuple(AttentionGroup.build(table[i], seq[i], pre[i], ext[i], start[i], device,
                                              whole=False, window=window) for i in groups))


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float, k_scale: float = 1.0,
                    v_scale: float = 1.0, *, sliding: bool = False,
                    sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q: [T, H, D]; k_cache, v_cache: [slots, H_kv, D] (this layer). Returns [T, H, D].

    A cache stored in another dtype (fp8, `exec.memory.kv_cache_dtype`) is cast to q's after the
    gather; its per-tensor scales (the pool's) are folded in: k_scale into the softmax
    scale, v_scale into the output. `sliding`: this layer attends within the metadata's
    window; `sinks`: [H] sink logits (gpt-oss), None for none."""
    scale = scale * k_scale
    if len(meta.groups) == 1:
        out = _group_attention(q, k_cache, v_cache, meta.groups[0], scale, sliding, sinks)
    else:
        out = torch.empty_like(q)
        for g in meta.groups:
            out.index_copy_(0, g.token_rows,
                            _group_attention(q, k_cache, v_cache, g, scale, sliding, sinks))
    return out if v_scale == 1.0 else out * v_scale


def _group_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     g: AttentionGroup, scale: float, sliding: bool = False,
                     sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of one group's tokens: [N, H, D], in the group's token order."""
    b, l_max = g.q_index.shape
    mask = g.mask_of(sliding)
    if l_max == 1 and g.token_rows is None:  # decode: one query per request, in request order
        qp = q.view(b, 1, *q.shape[1:]).transpose(1, 2)                    # [B, H, 1, D]
    else:
        qp = _rows(q, g.q_index.view(-1)).view(b, l_max, *q.shape[1:]).transpose(1, 2)  # [B, H, L, D]
    if l_max == 1 or sinks is not None:
        rows = _head_rows(g.kv_index, k_cache.shape[1])                     # [B, H_kv, S]
        k, v = _gather_heads(k_cache, rows), _gather_heads(v_cache, rows)   # [B, H_kv, S, D]
        out = _matmul_attention(qp, k, v, mask, scale, sinks)               # [B, H, L, D]
    else:
        k = _gather_tokens(k_cache, g.kv_index).to(q.dtype)                # [B, H_kv, S, D]
        v = _gather_tokens(v_cache, g.kv_index).to(q.dtype)
        out = F.scaled_dot_product_attention(qp, k, v, attn_mask=mask, scale=scale,
                                             enable_gqa=qp.shape[1] != k.shape[1])  # [B, H, L, D]
    out = out.transpose(1, 2).reshape(b * l_max, q.shape[1], q.shape[2])
    return out if g.out_index.numel() == b * l_max else _rows(out, g.out_index)  # [N, H, D]


def _matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                      scale: float, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention as two grouped matmuls with an fp32 softmax: decode (one query per
    request), and any query block of a model with sinks.
    q: [B, H, L, D] (n = L); k, v: [B, H_kv, S, D]; mask: [B, 1, L, S]; sinks: [H] or None.
    Returns [B, H, L, D].

    With sinks, head h's softmax runs over its S scores and sinks[h], and the sink's share
    is dropped (transformers' `eager_attention_forward` of gpt-oss). NOTE: this path holds
    the [B, H, L, S] scores; SDPA would not, but it cannot add a per-head logit.
    NOTE: CPU SDPA is ~10x slower than this in bf16 for one query row. Written as products and sums
    instead, inductor fused the gather, rotary and softmax into one loop nest that
    recomputed the rotary per key and gathered V one scalar at a time (70 against 25 us
    per layer at S = 150, SmolLM2-135M, 2 threads). At batch 1 the matmuls run in fp32
    (`work`): CPU bf16 matmuls of these shapes cost some 14 us a call against 5 in fp32
    (a compiled batch-1 step of SmolLM2-135M: 9.4-10.6 -> 8.4-8.8 ms); above batch 1 the
    fp32 copies of K and V cost more than that saves (batch 32: 5% fewer tokens/s)."""
    b, h, n, d = q.shape
    h_kv, s = k.shape[1], k.shape[2]
    work = torch.float32 if b == 1 else q.dtype
    groups = q.reshape(b, h_kv, h // h_kv * n, d).to(work)                # [B, H_kv, G*L, D]
    scores = torch.matmul(groups, k.to(work).transpose(-1, -2)).float()   # [B, H_kv, G*L, S]
    scores = (scores.view(b, h_kv, h // h_kv, n, s) * scale).masked_fill(
        ~mask.view(b, 1, 1, n, s), float("-inf"))                          # [B, H_kv, G, L, S]
    if sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:
        sink = sinks.float().view(1, h_kv, h // h_kv, 1, 1).expand(b, -1, -1, n, 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :s]
    out = torch.matmul(probs.reshape(b, h_kv, h // h_kv * n, s).to(work), v.to(work))  # [B, H_kv, G*L, D]
    return out.to(q.dtype).view(b, h, n, d)


def _gather_tokens(cache: torch.Tensor, kv_index: torch.Tensor) -> torch.Tensor:
    """cache [slots, H_kv, D], kv_index [B, S] -> [B, H_kv, S, D], a transposed view of the
    gathered [B, S, H_kv, D] rows (SDPA reads strided keys as they are)."""
    b, s = kv_index.shape
    return _rows(cache, kv_index.view(-1)).view(b, s, *cache.shape[1:]).transpose(1, 2)


def _head_rows(kv_index: torch.Tensor, h_kv: int) -> torch.Tensor:
    """kv_index [B, S] -> [B, H_kv, S]: row of (slot, head) in a cache viewed [slots * H_kv, D]."""
    heads = torch.arange(h_kv, device=kv_index.device)                    # [H_kv]
    return kv_index[:, None, :] * h_kv + heads[None, :, None]


def _gather_heads(cache: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """cache [slots, H_kv, D], rows [B, H_kv, S] (`_head_rows`) -> [B, H_kv, S, D],
    contiguous: gathered head-major, so that the attention matmuls read it without another
    copy (a row-major gather transposed was copied again inside matmul, some 4.6 of the 46
    ms of a batch-32 decode step of SmolLM2-135M)."""
    d = cache.shape[2]
    return _rows(cache.view(-1, d), rows.reshape(-1)).view(*rows.shape, d)


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[index] along dim 0 (index_select: several times faster than advanced indexing)."""
    return x.index_select(0, index)
