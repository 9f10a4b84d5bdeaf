"""`torch_dtype`: the dtype names the engine accepts (`dtype="bfloat16"`, ...) as torch dtypes."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """`dtype` as a torch.dtype; ValueError naming the choices for an unknown name."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]
