"""`kv_cache_dtype`: the dtype the paged KV cache stores, by SGLang's names
(`--kv-cache-dtype`): "auto" stores the model dtype; "fp8_e4m3" / "fp8_e5m2" store one byte
per value (torch.float8_e4m3fn / torch.float8_e5m2) and the model computes in its own dtype,
casting on read (`exec.memory.kv_pool`); "bf16" / "bfloat16" store bfloat16.
"""

from __future__ import annotations

import torch

KV_CACHE_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
                   "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
AUTO = "auto"


def kv_storage_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The torch dtype `kv_cache_dtype=name` stores; ValueError naming the field otherwise."""
    if name == AUTO:
        return model_dtype
    if not isinstance(name, str) or name not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {', '.join((AUTO, *KV_CACHE_DTYPES))}, "
                         f"got {name!r}")
    return KV_CACHE_DTYPES[name]


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
