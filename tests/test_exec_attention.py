"""Paged attention: the padded-block layout and its split into groups do not change results."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from exec.layers.attention import AttentionMetadata, paged_attention

H, H_KV, D = 4, 2, 8


def reference(q, k_cache, v_cache, table, seq, pre, ext, scale):
    """Each request alone: its queries against its own keys, causal from its prefix."""
    out, t = [], 0
    for row, s, p, e in zip(table, seq, pre, ext, strict=True):
        k = k_cache[torch.from_numpy(row[:s])].repeat_interleave(H // H_KV, 1).transpose(0, 1)
        v = v_cache[torch.from_numpy(row[:s])].repeat_interleave(H // H_KV, 1).transpose(0, 1)
        mask = torch.arange(s)[None, :] <= (p + torch.arange(e))[:, None]     # [e, s]
        out.append(F.scaled_dot_product_attention(q[t:t + e].transpose(0, 1), k, v,
                                                  attn_mask=mask, scale=scale).transpose(0, 1))
        t += e
    return torch.cat(out)


def test_mixed_batch_splits_into_groups_and_matches_requests_alone():
    """A batch of decodes and extends of different lengths is computed as padded groups
    by extend length (1; 3-4; 5-8), with the same outputs as each request attending alone."""
    gen = torch.Generator().manual_seed(0)
    seq, ext = np.array([9, 7, 12, 5]), np.array([1, 5, 1, 3])
    pre = seq - ext
    table = np.stack([np.random.default_rng(i).permutation(64)[:16] for i in range(4)])
    k_cache, v_cache = (torch.randn(64, H_KV, D, generator=gen) for _ in range(2))
    q = torch.randn(int(ext.sum()), H, D, generator=gen)
    meta = AttentionMetadata.build(table, np.arange(4), seq, pre, ext, torch.device("cpu"))
    assert len(meta.groups) == 3
    got = paged_attention(q, k_cache, v_cache, meta, D**-0.5)
    want = reference(q, k_cache, v_cache, table, seq, pre, ext, D**-0.5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_uniform_batches_use_one_group():
    """Pure decode batches, and extends within a factor of two, keep one padded block."""
    table = np.arange(64).reshape(4, 16)
    for ext in (np.array([1, 1, 1, 1]), np.array([5, 8, 6, 7])):
        seq = ext + 4
        meta = AttentionMetadata.build(table, np.arange(4), seq, seq - ext, ext, torch.device("cpu"))
        assert len(meta.groups) == 1 and meta.groups[0].token_rows is None


def test_padded_attention_work_counts_what_the_layout_computes():
    """Two decodes (seq 10 and 3) and a 50-token extend on seq 100: the decode group reads
    2 x 10 keys, the extend group 1 x 100 keys and scores 50 x 100 pairs."""
    from shared.batch.attention_layout import padded_attention_work

    work = padded_attention_work(np.array([10, 3, 100]), np.array([1, 1, 50]))
    assert work == (2 * 10 + 100, 2 * 1 * 10 + 50 * 100)
    meta = AttentionMetadata.build(np.zeros((3, 128), np.int64), np.arange(3), np.array([10, 3, 100]),
                                   np.array([9, 2, 50]), np.array([1, 1, 50]), torch.device("cpu"))
    keys = sum(g.kv_index.numel() for g in meta.groups)
    pairs = sum(g.mask.numel() for g in meta.groups)
    assert (keys, pairs) == tuple(work)
