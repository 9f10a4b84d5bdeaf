"""How many KV tokens to allocate when the user does not say (`max_total_tokens=None`)."""

from __future__ import annotations

import os

import torch

from exec.kv_pool import KVPool
from exec.model_config import ModelConfig

CPU_MEMORY_FRACTION = 0.2
CUDA_MEMORY_FRACTION = 0.8
MAX_DEFAULT_TOKENS = 1 << 20


def default_kv_capacity(c: ModelConfig, device: str, dtype: str) -> int:
    """Tokens of KV that fit in a fraction of the free memory, after the weights are loaded:
    20% of available host memory on CPU (MemAvailable), 80% of free device memory on CUDA
    (`torch.cuda.mem_get_info`); at most 2^20 tokens, at least one full context."""
    from exec.torch_dtype import torch_dtype

    per_token = KVPool.bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, torch_dtype(dtype))
    free = _free_bytes(torch.device(device))
    tokens = int(free // per_token)
    return max(min(tokens, MAX_DEFAULT_TOKENS), c.context_length + 1)


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
