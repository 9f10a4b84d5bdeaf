"""NVIDIA B200 (HGX, 1000 W): datasheet figures, kernel-model constants, node network."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, DGX8_400G, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = "NVIDIA HGX B200 (1000 W) figures via glennklockwood.com/garden/processors/B200"

B200 = Hardware(
    key="b200", name="NVIDIA B200 (HGX, 1000 W)",
    flops_bf16=2250e12, flops_fp8=4500e12, flops_fp4=9000e12, flops_fp32=80e12,
    mem_bw=8.0e12, mem_capacity=180e9, interconnect_bw=900e9,
    compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"2,250 TFLOP/s dense BF16 (4,500 sparse): {DATASHEET}",
        "flops_fp8": f"4,500 TFLOP/s dense FP8 (9,000 sparse): {DATASHEET}",
        "flops_fp4": f"9,000 TFLOP/s dense FP4 (18,000 sparse): {DATASHEET}",
        "flops_fp32": f"80 TFLOP/s FP32 (non-tensor): {DATASHEET}",
        "mem_bw": f"8 TB/s HBM3e: {DATASHEET}",
        "mem_capacity": "180 GB usable of 192 GB raw HBM3e (reference/simulators.md §8; "
                        "docs.vultr.com inference cookbook sees 179 GB per GPU)",
        "interconnect_bw": f"NVLink 5 '2x 900 GB/s' (1.8 TB/s both ways): {DATASHEET}",
        "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({BLIS}); "
                              "no published B200 figure",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(148, 1745e12, 3432.5e12, 1613 / 2250, (
        ("num_sms", "148 SMs over two dies (FlashAttention-4 and CUTLASS Blackwell kernels "
                    "size their persistent grids to 148 CTAs)"),
        ("mamf_bf16", f"B200 SXM 1745.0 TFLOP/s bf16: {MAMF}"),
        ("mamf_fp8", f"B200 SXM 3432.5 TFLOP/s fp8 e4m3: {MAMF}"),
        ("mamf_fp4", "B200 5702 TFLOP/s FP4 x FP4 (MXF4, the block-scaled fp4 MMA NVFP4 "
                     "also runs on) at 8192 x 8192 x 8192, the best of a "
                     "published seven-shape sweep (cuBLASLt 13.3: 5239): deepseek-ai/DeepGEMM "
                     "pull request 348 (2026-06-01, CUDA 12.9); the fp8-MAMF-fraction "
                     "estimate it replaces (6865) was 20% above it"),
        ("attention_fraction", "FlashAttention-4 (arXiv 2603.05451, March 2026): up "
                               "to 1613 TFLOP/s bf16 forward on B200, 71% utilization: "
                               "1613 / 2250 (the catalogue's dense bf16 peak) = 0.717")),
        mamf_fp4=5702e12),
    network=NodeNetwork(8, 50e9, DGX8_400G),
)
