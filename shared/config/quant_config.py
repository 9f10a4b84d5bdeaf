"""`QuantConfig`: a checkpoint's `quantization_config` (config.json), read once for both
executors (`shared.config.hf_config.HFConfig.quantization`).

`method` is the checkpoint's `quant_method` ("fp8", "mxfp4", "awq", "gptq", ...);
`weight_bits` what the simulator prices a quantized weight at (8 for fp8, 4 for the 4-bit
methods); `weight_block_size` fp8's [rows, cols] scale blocks (None: one scale per tensor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.config.invalid_model_config import InvalidModelConfig

WEIGHT_BITS = {"fp8": 8, "fbgemm_fp8": 8, "compressed-tensors": 8, "mxfp4": 4, "awq": 4,
               "gptq": 4, "bitsandbytes": 4}


@dataclass(frozen=True)
class QuantConfig:
    method: str
    weight_bits: int
    weight_block_size: tuple[int, int] | None = None
    activation_scheme: str = "dynamic"
    modules_to_not_convert: tuple[str, ...] = ()


def quant_config(d: dict[str, Any]) -> QuantConfig | None:
    """config dict `d`'s `quantization_config`, or None for an unquantized checkpoint."""
    q = d.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict) or not isinstance(q.get("quant_method"), str):
        raise InvalidModelConfig(f"quantization_config must be an object with a quant_method, got {q!r}")
    method = q["quant_method"]
    bits = q.get("bits") or WEIGHT_BITS.get(method)
    if not isinstance(bits, int):
        raise InvalidModelConfig(f"quantization_config: unknown quant_method {method!r} without "
                                 f"'bits' (known: {', '.join(WEIGHT_BITS)})")
    return QuantConfig(method, bits, _block(q.get("weight_block_size")),
                       str(q.get("activation_scheme", "dynamic")),
                       tuple(q.get("modules_to_not_convert") or q.get("ignored_layers") or ()))


def _block(block: Any) -> tuple[int, int] | None:
    if block is None:
        return None
    if (not isinstance(block, list | tuple) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise InvalidModelConfig(f"quantization_config.weight_block_size must be two positive "
                                 f"integers, got {block!r}")
    return (block[0], block[1])
