"""The paged KV pool: its tensors start zeroed, and on CPU cost resident memory only for the
pages a run writes (the default CPU pool is a fifth of the host's memory)."""

from __future__ import annotations

import torch

from exec.memory.kv_pool import KVPool


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_cpu_pool_is_zero_and_resident_only_where_written():
    """A 1 GiB pool adds well under 64 MiB of resident memory until written, reads as zeros,
    and a write lands in the layer's slots."""
    before = _resident_bytes()
    pool = KVPool(num_layers=8, num_slots=(1 << 30) // (2 * 8 * 4 * 64 * 4), page_size=1,
                  kv_heads=4, head_dim=64, dtype=torch.float32, device="cpu")
    assert pool.k.nbytes + pool.v.nbytes >= 1 << 30
    assert _resident_bytes() - before < 64 << 20
    assert not pool.k[:, :1000].any() and not pool.v[:, -1000:].any()
    loc = torch.tensor([3, 7])
    pool.write(2, loc, torch.ones(2, 4, 64), torch.full((2, 4, 64), 2.0))
    assert pool.k[2, 3].eq(1).all() and pool.v[2, 7].eq(2).all() and not pool.k[1, 3].any()


def test_a_pool_in_fp8_stores_one_byte_per_value():
    """kv_cache_dtype fp8: the same slots in half the bytes of bfloat16, values cast on write."""
    fp8 = KVPool(2, 16, 1, 2, 8, torch.float8_e4m3fn, "cpu")
    bf16 = KVPool(2, 16, 1, 2, 8, torch.bfloat16, "cpu")
    assert 2 * fp8.k.nbytes == bf16.k.nbytes and fp8.k.dtype == torch.float8_e4m3fn
    fp8.write(0, torch.tensor([1]), torch.full((1, 2, 8), 0.5), torch.full((1, 2, 8), -3.0))
    assert fp8.k[0, 1].float().eq(0.5).all() and fp8.v[0, 1].float().eq(-3.0).all()
