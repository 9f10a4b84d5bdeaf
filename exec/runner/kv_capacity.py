"""How many KV tokens to allocate when the user does not say (`max_total_tokens=None`), and
whether the number the user says fits (`check_kv_fits`)."""

from __future__ import annotations

import os

import torch

from exec.memory.kv_cache_dtype import AUTO, dtype_bytes, kv_storage_dtype
from exec.memory.kv_pool import kv_pool_nbytes
from exec.models.model_config import ModelConfig
from shared.config.kv_cache_layout import KVCacheLayout

CPU_MEMORY_FRACTION = 0.2
CUDA_MEMORY_FRACTION = 0.8
MAX_DEFAULT_TOKENS = 1 << 20
# NOTE: the spec's allocator keeps, per KV page, a free-ring entry (int64), a free flag
# (bool) and a stamp (int64) in host memory (shared.memory.token_allocator); per slot is an upper bound.
HOST_BYTES_PER_SLOT = 8 + 1 + 8


def _kv_dtype(dtype: str, kv_cache_dtype: str) -> torch.dtype:
    from exec.device.torch_dtype import torch_dtype

    return kv_storage_dtype(kv_cache_dtype, torch_dtype(dtype))


def default_kv_capacity(c: ModelConfig, device: str, dtype: str, kv_cache_dtype: str = AUTO) -> int:
    """Tokens of KV that fit in a fraction of the free memory, after the weights are loaded:
    20% of available host memory on CPU (MemAvailable), 80% of free device memory on CUDA
    (`torch.cuda.mem_get_info`); at most 2^20 tokens, at least one full context. Bytes per
    token come from the model's `KVCacheLayout` at the cache's storage dtype (fp8: half)."""
    per_token = KVCacheLayout.of(c, dtype_bytes(_kv_dtype(dtype, kv_cache_dtype))).bytes_per_token
    free = _free_bytes(torch.device(device))
    tokens = int(free // per_token)
    return max(min(tokens, MAX_DEFAULT_TOKENS), c.context_length + 1)


def check_kv_fits(c: ModelConfig, device: str, dtype: str, max_total_tokens: int, page_size: int,
                  kv_cache_dtype: str = AUTO) -> None:
    """Raise ValueError naming `max_total_tokens` if its KV pool cannot be allocated: the K
    and V tensors need more than the free memory of `device` (all of it, not the default's
    fraction), or they and the allocator's host bookkeeping more than the host has."""
    dev = torch.device(device)
    kv = kv_pool_nbytes(c, max_total_tokens, page_size, _kv_dtype(dtype, kv_cache_dtype))
    host = (max_total_tokens + page_size) * HOST_BYTES_PER_SLOT
    needs = [(kv, _available_bytes(dev), str(dev))] if dev.type != "cpu" else []
    needs.append((host + (kv if dev.type == "cpu" else 0), _host_available(), "the host"))
    for need, available, where in needs:
        if need > available:
            raise ValueError(f"max_total_tokens={max_total_tokens}: the KV pool needs {need:,} bytes "
                             f"({need / 2**30:,.2f} GiB) but {available:,} bytes ({available / 2**30:,.2f} "
                             f"GiB) are available on {where}; lower max_total_tokens or leave it unset")


def _available_bytes(device: torch.device) -> int:
    """Free memory on an accelerator (CUDA's mem_get_info; NPU and others: no check)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return 1 << 62


def _free_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] * CUDA_MEMORY_FRACTION
    return _host_available() * CPU_MEMORY_FRACTION


def _host_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
