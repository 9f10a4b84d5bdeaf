"""Weight and KV dtypes of a simulated run: their names, bytes per value, and SGLang's flags
that pick them (`--quantization`, `--kv-cache-dtype`).

Weights: bf16, fp16, fp32, fp8 (W8A8: the GEMMs run at the hardware's fp8 peak), nvfp4
(W4A4: the GEMMs run at the hardware's fp4 peak, Blackwell's FP4 tensor cores), int4
(weight-only: 4-bit weights dequantised in the GEMM, which runs at the bf16 peak, as SGLang's
AWQ/GPTQ/Marlin kernels do) or mxfp4 (weight-only as well: the OCP Microscaling format,
4-bit E2M1 values with one 8-bit E8M0 scale per block of 32, 0.5 + 1/32 bytes a weight:
"OCP Microscaling Formats (MX) Specification v1.0", 2023, section 5; gpt-oss ships its
routed experts in it, and SGLang's and vLLM's Hopper MoE kernels for it (triton_kernels'
matmul_ogs) dequantise to bf16). KV: bf16, fp16, fp32 or fp8 (storage only: attention
computes in bf16). Without `--quantization` a run keeps the checkpoint's dtype: fp8 for a
`quantization_config` of 8 bits (DeepSeek-V3's block fp8), mxfp4 for gpt-oss's, int4 for the
other 4-bit methods (AWQ, GPTQ), else bf16.

A quantized dtype (fp8, nvfp4, int4, mxfp4) applies to the linear layers a checkpoint
converts: by default every one but the MoE router, with the embeddings and the LM head left
in bf16 (`UNQUANTIZED_BY_DEFAULT`: NVIDIA ModelOpt's `_default_disabled_quantizer_cfg` in
`modelopt/torch/quantization/config.py`, which every FP8/NVFP4 config of TensorRT-LLM's and
SGLang's ModelOpt checkpoints includes, disables `*lm_head*`, `*router*`, `*mlp.gate.*` and
`*block_sparse_moe.gate*`; SGLang's and vLLM's online fp8 methods return a quantized method
only for linear and fused-MoE layers, never for the embedding or the LM head, and the MoE
models build their gate unquantized), and more where the checkpoint's `modules_to_not_convert`
names more (`sim.model.weight_formats`).

nvfp4 (`--quantization nvfp4`, or SGLang's name `modelopt_fp4`) is NVIDIA's ModelOpt NVFP4:
4-bit E2M1 values with one FP8 E4M3 scale per block of 16 values and one fp32 scale per
tensor (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference",
developer.nvidia.com blog, 2025; the TensorRT Model Optimizer NVFP4 format). A weight costs
0.5 + 1/16 = 0.5625 bytes (the block scale priced; the per-tensor scale is not). Activations
are priced at 2 bytes as for the other dtypes (the fp4 activation quantisation is not).
A checkpoint's ModelOpt `quant_algo` (FP8, NVFP4, ...) and compressed-tensors weights (8-bit
float, 4-bit float, 4-bit int) name its format (`shared.config.quant_config`); one the cost
models cannot price is refused naming it.

NOTE: the other formats' scales are not priced (fp8 blocks of 128x128 add one fp32 per
16384 weights; int4 groups of 128 add about 3%).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.config.quant_config import QuantConfig
    from sim.hardware.hardware import Hardware

DTYPE_BYTES = MappingProxyType({"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1})
NVFP4_BYTES = 0.5 + 1 / 16   # a 4-bit value plus its share of the 16-value block's fp8 scale
MXFP4_BYTES = 0.5 + 1 / 32   # a 4-bit value plus its share of the 32-value block's E8M0 scale
WEIGHT_DTYPE_BYTES = MappingProxyType({**DTYPE_BYTES, "nvfp4": NVFP4_BYTES, "int4": 0.5,
                                       "mxfp4": MXFP4_BYTES})
WEIGHT_ONLY_DTYPES = ("int4", "mxfp4")
QUANTIZED_DTYPES = ("fp8", "nvfp4", "int4", "mxfp4")   # applied per module (module doc)
DTYPE_ALIASES = MappingProxyType({
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
})
QUANTIZATIONS = MappingProxyType({"fp8": "fp8", "nvfp4": "nvfp4", "modelopt_fp4": "nvfp4",
                                  "mxfp4": "mxfp4", "int4-weight-only": "int4", "none": "bf16"})
# The tensor-core peak a W8A8 / W4A4 weight dtype needs: (Hardware field, what it names).
NEEDED_PEAK = MappingProxyType({"fp8": ("flops_fp8", "fp8"), "nvfp4": ("flops_fp4", "fp4")})
KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16", "fp16", "float16")


def canonical_dtype(name: str, weights: bool = False) -> str:
    """'bf16', 'fp16', 'fp8' or 'fp32' (and 'nvfp4' or 'int4' when `weights`) for a dtype
    name or alias; ValueError listing the known ones otherwise."""
    known = WEIGHT_DTYPE_BYTES if weights else DTYPE_BYTES
    key = str(name).lower().removeprefix("torch.")
    key = DTYPE_ALIASES.get(key, key)
    if key not in known:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(known)} "
                         f"(aliases: {', '.join(DTYPE_ALIASES)})")
    return key


def checkpoint_weight_dtype(quantization: QuantConfig | None) -> str:
    """The weight dtype a checkpoint's `quantization_config` stores (bf16 without one)."""
    if quantization is None or quantization.weight_bits >= 16:
        return "bf16"
    if quantization.weight_format:
        return quantization.weight_format
    return "fp8" if quantization.weight_bits == 8 else "int4"


def run_dtypes(checkpoint_dtype: str, quantization: str | None, kv_cache_dtype: str = "auto"
               ) -> tuple[str, str]:
    """(weight dtype, KV dtype) of a run: `quantization` one of QUANTIZATIONS (None: the
    checkpoint's), `kv_cache_dtype` one of KV_CACHE_DTYPES ("auto": bf16, the activations').
    ValueError naming the flag otherwise."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization {quantization!r} is not one of "
                         f"{', '.join(QUANTIZATIONS)}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} is not one of "
                         f"{', '.join(KV_CACHE_DTYPES)}")
    weights = checkpoint_dtype if quantization is None else QUANTIZATIONS[quantization]
    kv = "bf16" if kv_cache_dtype == "auto" else canonical_dtype(kv_cache_dtype)
    return weights, kv


def check_precision(hardware: Hardware, weight_dtype: str, requested: str | None) -> None:
    """fp8 weights (W8A8) need the hardware's fp8 peak, nvfp4 (W4A4) its fp4 peak: ValueError
    naming the hardware and the field otherwise. `requested` is the --quantization value
    (None: the checkpoint's)."""
    if weight_dtype not in NEEDED_PEAK:
        return
    field, unit = NEEDED_PEAK[weight_dtype]
    if getattr(hardware, field) is not None:
        return
    what = (f"quantization {requested!r}" if requested is not None
            else f"the checkpoint's quantization_config ({weight_dtype})")
    fp8 = "fp8, " if hardware.flops_fp8 is not None else ""
    raise ValueError(f"{what} needs {unit} tensor cores, but hardware {hardware.key} has no "
                     f"{field} ({hardware.source(field)}); choose quantization "
                     f"{fp8}int4-weight-only or none")
