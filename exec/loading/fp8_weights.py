"""fp8 checkpoints (`quantization_config.quant_method == "fp8"`): dequantized at load time.

Such a checkpoint stores each quantized linear's `*.weight` as float8_e4m3fn next to its
scale: `*.weight_scale_inv` with one scale per `weight_block_size` block, shape
[ceil(out / block_out), ceil(in / block_in)] (DeepSeek-V3, Qwen3-FP8), or `*.weight_scale`,
one scale per tensor (shape [] or [1]) when there is no block size. Both are multipliers:
the real weight is `weight.float() * scale`, each scale broadcast over its block.

The approach is dequantize-at-load on the host: `exec.loading.loader` reads the fp8 tensor and its
scale, multiplies them in float32 and casts to the model dtype, so the model itself is an
ordinary unquantized one and the loaded weights occupy model-dtype memory (fp8 checkpoints
save disk and download, not memory, here). Scale tensors are never model tensors: the loader
skips them by name (`is_scale_name`), as it does activation scales (`*.input_scale`) and fp8
KV-cache scales (`*.k_scale`, `*.v_scale`, `*.kv_scale`), which this executor does not use
(the KV pool's scales stay 1.0, `exec.memory.kv_pool`).
"""

from __future__ import annotations

import math
from collections.abc import Container

import torch

from shared.config.quant_config import QuantConfig

SUPPORTED_METHODS = ("fp8",)
WEIGHT_SCALE_SUFFIXES = ("_scale_inv", "_scale")  # appended to a `*.weight` name
SKIPPED_SUFFIXES = (".weight_scale_inv", ".weight_scale", ".input_scale",
                    ".k_scale", ".v_scale", ".kv_scale")


def check_supported(quant: QuantConfig | None, where: str) -> None:
    """ValueError naming quant_method unless the checkpoint is unquantized or fp8."""
    if quant is not None and quant.method not in SUPPORTED_METHODS:
        raise ValueError(f"{where}: quantization_config.quant_method {quant.method!r} is not "
                         f"supported by the exec loader (supported: {', '.join(SUPPORTED_METHODS)})")


def is_scale_name(name: str) -> bool:
    """A checkpoint tensor that holds a quantization scale, not a model tensor."""
    return name.endswith(SKIPPED_SUFFIXES)


def scale_name(weight_name: str, names: Container[str]) -> str | None:
    """The name of `weight_name`'s scale tensor among `names`, or None (not quantized)."""
    for suffix in WEIGHT_SCALE_SUFFIXES:
        if weight_name + suffix in names:
            return weight_name + suffix
    return None


def dequantize(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None,
               name: str) -> torch.Tensor:
    """fp8 `weight` [out, in] times `scale` -> float32 [out, in].

    `scale`: one value (per tensor), or with `block` = (bo, bi) [ceil(out/bo), ceil(in/bi)].
    Raises ValueError naming `name` when the scale's shape fits neither.
    """
    w, s = weight.to(torch.float32), scale.to(torch.float32)
    if s.numel() == 1:
        return w * s.reshape(())
    if block is None or w.dim() != 2:
        raise ValueError(f"tensor {name!r}: scale of shape {tuple(s.shape)} needs "
                         f"quantization_config.weight_block_size and a 2-D weight")
    out, inp = w.shape
    bo, bi = block
    expected = (math.ceil(out / bo), math.ceil(inp / bi))
    if tuple(s.shape) != expected:
        raise ValueError(f"tensor {name!r}: weight {tuple(w.shape)} with weight_block_size "
                         f"{list(block)} needs a scale of shape {expected}, got {tuple(s.shape)}")
    full = s.repeat_interleave(bo, dim=0)[:out].repeat_interleave(bi, dim=1)[:, :inp]  # [out, in]
    return w * full
