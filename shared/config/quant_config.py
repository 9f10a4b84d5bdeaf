"""`QuantConfig`: a checkpoint's `quantization_config` (config.json), read once for both
executors (`shared.config.hf_config.HFConfig.quantization`).

`method` is the checkpoint's `quant_method` ("fp8", "mxfp4", "awq", "gptq", "modelopt",
"compressed-tensors", ...); `weight_bits` what the simulator prices a quantized weight at (8
for fp8, 4 for the 4-bit methods); `weight_format` the format its weights are stored in
("fp8", "nvfp4", "mxfp4", "int4"); `weight_block_size` fp8's [rows, cols] scale blocks (None:
one scale per tensor).

ModelOpt checkpoints name their algorithm (`quant_algo`: FP8, NVFP4, W4A16_AWQ, ...),
compressed-tensors ones their weights' bits and type per group (`config_groups.*.weights`):
those are read. A format that names no bits, or one the cost models have no rate for (8-bit
integers, for one), is refused naming it (InvalidModelConfig), before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.config.invalid_model_config import InvalidModelConfig

# quant_method -> the format its weights are stored in (methods whose format the config
# names elsewhere: `_modelopt_format`, `_compressed_format`)
METHOD_FORMATS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "mxfp4", "awq": "int4",
                  "gptq": "int4", "bitsandbytes": "int4"}
FORMAT_BITS = {"fp8": 8, "nvfp4": 4, "mxfp4": 4, "int4": 4}
MODELOPT_ALGOS = {"FP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8", "FP8_BLOCK": "fp8",
                  "NVFP4": "nvfp4", "W4A16_AWQ": "int4", "W4A8_AWQ": "int4"}


@dataclass(frozen=True)
class QuantConfig:
    method: str
    weight_bits: int
    weight_block_size: tuple[int, int] | None = None
    activation_scheme: str = "dynamic"
    modules_to_not_convert: tuple[str, ...] = ()
    weight_format: str = ""


def quant_config(d: dict[str, Any]) -> QuantConfig | None:
    """config dict `d`'s `quantization_config`, or None for an unquantized checkpoint."""
    q = d.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict) or not isinstance(q.get("quant_method"), str):
        raise InvalidModelConfig(f"quantization_config must be an object with a quant_method, got {q!r}")
    method = q["quant_method"]
    fmt = _weight_format(method, q)
    bits = FORMAT_BITS[fmt] if fmt else q.get("bits")
    if isinstance(q.get("bits"), int) and not fmt:
        fmt = "int4" if q["bits"] <= 4 else "fp8"
    if not isinstance(bits, int):
        raise InvalidModelConfig(f"quantization_config: unknown quant_method {method!r} without "
                                 f"'bits' (known: {', '.join([*METHOD_FORMATS, 'modelopt', 'compressed-tensors'])})")
    ignored = q.get("modules_to_not_convert") or q.get("ignored_layers") or q.get("ignore") \
        or q.get("exclude_modules") or ()
    return QuantConfig(method, bits, _block(q.get("weight_block_size")),
                       str(q.get("activation_scheme", "dynamic")), tuple(ignored), fmt)


def _weight_format(method: str, q: dict[str, Any]) -> str:
    """The weights' format a quantization_config names ("" when it names only `bits`)."""
    if method == "modelopt":
        return _modelopt_format(q)
    if method == "compressed-tensors":
        return _compressed_format(q)
    fmt = METHOD_FORMATS.get(method, "")
    if fmt == "int4" and q.get("bits", 4) != 4:
        raise InvalidModelConfig(f"quantization_config: {method} with {q['bits']}-bit integer "
                                 f"weights cannot be priced (4-bit only)")
    return fmt


def _modelopt_format(q: dict[str, Any]) -> str:
    algo = q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo")
    if algo not in MODELOPT_ALGOS:
        raise InvalidModelConfig(f"quantization_config: ModelOpt quant_algo {algo!r} cannot be "
                                 f"priced (known: {', '.join(MODELOPT_ALGOS)})")
    return MODELOPT_ALGOS[algo]


def _compressed_format(q: dict[str, Any]) -> str:
    """compressed-tensors: the weights of its config groups (one format for all of them)."""
    kinds = {(w.get("num_bits"), w.get("type")) for g in (q.get("config_groups") or {}).values()
             if isinstance(g, dict) for w in [g.get("weights") or {}]}
    formats = {(8, "float"): "fp8", (4, "float"): "nvfp4", (4, "int"): "int4"}
    if len(kinds) != 1 or next(iter(kinds)) not in formats:
        raise InvalidModelConfig(f"quantization_config: compressed-tensors weights "
                                 f"{sorted(kinds, key=str)!r} cannot be priced (known: 8-bit float, "
                                 f"4-bit float (nvfp4) or 4-bit int, one for every group)")
    return formats[next(iter(kinds))]


def _block(block: Any) -> tuple[int, int] | None:
    if block is None:
        return None
    if (not isinstance(block, list | tuple) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise InvalidModelConfig(f"quantization_config.weight_block_size must be two positive "
                                 f"integers, got {block!r}")
    return (block[0], block[1])
