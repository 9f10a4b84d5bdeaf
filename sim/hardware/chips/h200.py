"""NVIDIA H200 SXM 141GB (H100's GH100 compute, more HBM): datasheet figures, kernel-model
constants, node network."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.h100 import DATASHEET as H100_DATASHEET
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, DGX8_400G, FA3, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = ("NVIDIA H200 SXM spec (lzwjava.github.io/nvidia-h200-gpu-specs-en; same GH100 "
             "die as H100)")

H200 = Hardware(
    key="h200", name="NVIDIA H200 SXM 141GB",
    flops_bf16=989.4e12, flops_fp8=1978.9e12, flops_fp4=None, flops_fp32=66.9e12,
    mem_bw=4.8e12, mem_capacity=141e9, interconnect_bw=450e9,
    compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"989 TFLOP/s dense BF16, same GH100 compute as H100: {DATASHEET}; "
                      f"{H100_DATASHEET}",
        "flops_fp8": f"3,958 TFLOP/s FP8 'with sparsity' -> 1,978.9 dense: {DATASHEET}",
        "flops_fp4": f"none: Hopper (same GH100 die as H100) has no FP4 tensor cores "
                     f"({DATASHEET} lists FP8 as the narrowest); nvfp4 weights are refused",
        "flops_fp32": f"same GH100 die as H100 (66.9 TFLOP/s FP32): {H100_DATASHEET}",
        "mem_bw": f"4.8 TB/s HBM3e: {DATASHEET}",
        "mem_capacity": f"141 GB HBM3e: {DATASHEET}",
        "interconnect_bw": f"NVLink 4 900 GB/s both ways = 450 GB/s each way: {DATASHEET}",
        "compute_efficiency": f"H100's prefill MFU 0.45 (same compute die): {BLIS}",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(132, 794.5e12, 1453.4e12, 0.75, (
        ("num_sms", "same GH100 SXM configuration as H100: 132 SMs"),
        ("mamf_bf16", f"'H200 is the same' as H100 SXM's 794.5 TFLOP/s bf16: {MAMF}"),
        ("mamf_fp8", f"H200 SXM 1453.4 TFLOP/s fp8 e4m3: {MAMF}"),
        ("attention_fraction", f"same die as H100: {FA3}"))),
    network=NodeNetwork(8, 50e9, DGX8_400G),
)
