"""`ChipKernels`: what the kernel-level cost model (`sim.cost.kernel.model`) needs of a chip
beyond the hardware catalogue's peaks: its SM count (tiles run in waves of it), the
maximum achievable matmul FLOP/s at bf16, fp8 and fp4 (MAMF: the best of a shape sweep, which
no real kernel beats), and the fraction of the bf16 peak a FlashAttention forward reaches on
long sequences. Each number has its source.
"""

from __future__ import annotations

from dataclasses import dataclass

_MAMF = ("stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul "
         "FLOPS comparison table' (mamf-finder.py shape sweeps)")
_FA2 = ("FlashAttention-2 (Dao 2023, arXiv 2307.08691): forward reaches up to 73% of A100's "
        "peak at long sequences")
_FA3 = ("FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608): up to 740 TFLOP/s bf16 on "
        "H100, 75% of peak")


@dataclass(frozen=True)
class ChipKernels:
    key: str
    num_sms: int
    mamf_bf16: float          # FLOP/s
    mamf_fp8: float | None    # FLOP/s; None: no fp8 tensor cores, or no measurement (fp8
                              # GEMMs then priced at the bf16 MAMF)
    attention_fraction: float  # FlashAttention forward FLOP/s / bf16 peak, long sequences
    sources: tuple[tuple[str, str], ...]
    mamf_fp4: float | None = None  # FLOP/s of NVFP4 (W4A4) GEMMs; None: no fp4 tensor cores

    def mamf(self, dtype: str) -> float | None:
        """The achievable matmul FLOP/s of a GEMM in `dtype` ("fp8", "nvfp4" or the 16-bit
        ones); None where the chip has no figure for fp8 or nvfp4."""
        if dtype == "fp8":
            return self.mamf_fp8
        return self.mamf_fp4 if dtype == "nvfp4" else self.mamf_bf16


CHIP_KERNELS = {c.key: c for c in (
    ChipKernels("a100-80g", 108, 271.2e12, None, 0.73, (
        ("num_sms", "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs (SXM4)"),
        ("mamf_bf16", f"A100 SXM 271.2 TFLOP/s bf16: {_MAMF}"),
        ("attention_fraction", _FA2))),
    ChipKernels("h100", 132, 794.5e12, 1402.6e12, 0.75, (
        ("num_sms", "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (SXM5)"),
        ("mamf_bf16", f"H100 SXM 794.5 TFLOP/s bf16: {_MAMF}"),
        ("mamf_fp8", f"H100 SXM 1402.6 TFLOP/s fp8 e4m3: {_MAMF}"),
        ("attention_fraction", _FA3))),
    ChipKernels("h200", 132, 794.5e12, 1453.4e12, 0.75, (
        ("num_sms", "same GH100 SXM configuration as H100: 132 SMs"),
        ("mamf_bf16", f"'H200 is the same' as H100 SXM's 794.5 TFLOP/s bf16: {_MAMF}"),
        ("mamf_fp8", f"H200 SXM 1453.4 TFLOP/s fp8 e4m3: {_MAMF}"),
        ("attention_fraction", f"same die as H100: {_FA3}"))),
    ChipKernels("b200", 148, 1745e12, 3432.5e12, 1613 / 2250, (
        ("num_sms", "148 SMs over two dies (FlashAttention-4 and CUTLASS Blackwell kernels "
                    "size their persistent grids to 148 CTAs)"),
        ("mamf_bf16", f"B200 SXM 1745.0 TFLOP/s bf16: {_MAMF}"),
        ("mamf_fp8", f"B200 SXM 3432.5 TFLOP/s fp8 e4m3: {_MAMF}"),
        ("mamf_fp4", "B200 5702 TFLOP/s FP4 x FP4 (MXF4, the block-scaled fp4 MMA NVFP4 "
                     "also runs on) at 8192 x 8192 x 8192, the best of a "
                     "published seven-shape sweep (cuBLASLt 13.3: 5239): deepseek-ai/DeepGEMM "
                     "pull request 348 (2026-06-01, CUDA 12.9); the fp8-MAMF-fraction "
                     "estimate it replaces (6865) was 20% above it"),
        ("attention_fraction", "FlashAttention-4 (arXiv 2603.05451, March 2026): up "
                               "to 1613 TFLOP/s bf16 forward on B200, 71% utilization: "
                               "1613 / 2250 (the catalogue's dense bf16 peak) = 0.717")),
        mamf_fp4=5702e12),
    ChipKernels("mi300x", 304, 668.4e12, None, 0.51, (
        ("num_sms", "AMD Instinct MI300X data sheet: 304 compute units"),
        ("mamf_bf16", f"MI300X 668.4 TFLOP/s bf16 (ROCm 6.3, TunableOp): {_MAMF}"),
        ("mamf_fp8", f"none measured ({_MAMF} has an empty MI300X fp8 row): fp8 GEMMs are "
                     "priced at the bf16 MAMF"),
        ("attention_fraction", "assumption: the chip's bf16 MAMF fraction (0.51); no published "
                               "FlashAttention figure"))),
    ChipKernels("910b", 24, 0.38 * 354e12, None, 0.38, (
        ("num_sms", "LOW CONFIDENCE: 24 AI Cores (Ascend 910B2, vendor briefings)"),
        ("mamf_bf16", "LOW CONFIDENCE assumption: the catalogue's compute efficiency (0.38) "
                      "x the bf16 peak; no published matmul sweep"),
        ("attention_fraction", "LOW CONFIDENCE assumption: the catalogue's compute efficiency"))),
)}


def chip_kernels(key: str) -> ChipKernels:
    """The entry for a hardware key; ValueError listing the known keys otherwise."""
    if key not in CHIP_KERNELS:
        raise ValueError(f"the kernel cost model has no entry for hardware {key!r} "
                         f"(known: {', '.join(CHIP_KERNELS)}); use the roofline cost model")
    return CHIP_KERNELS[key]
