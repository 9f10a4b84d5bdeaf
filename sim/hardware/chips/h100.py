"""NVIDIA H100 SXM5 80GB: datasheet figures, kernel-model constants, node network."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, DGX8_400G, FA3, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = ("NVIDIA H100 SXM5 datasheet ('shown with sparsity; 1/2 lower without') via "
             "glennklockwood.com/garden/processors/h100")

H100 = Hardware(
    key="h100", name="NVIDIA H100 SXM5 80GB",
    flops_bf16=989.4e12, flops_fp8=1978.9e12, flops_fp4=None, flops_fp32=66.9e12,
    mem_bw=3.35e12, mem_capacity=80e9, interconnect_bw=450e9,
    compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"989.4 TFLOP/s dense BF16 (1,979 sparse): {DATASHEET}",
        "flops_fp8": f"1,978.9 TFLOP/s dense FP8 (3,958 sparse): {DATASHEET}",
        "flops_fp4": f"none: Hopper has no FP4 tensor cores ({DATASHEET} lists FP8 as the "
                     "narrowest); nvfp4 weights are refused",
        "flops_fp32": f"66.9 TFLOP/s FP32 (non-tensor): {DATASHEET}",
        "mem_bw": f"3.35 TB/s HBM3: {DATASHEET}",
        "mem_capacity": f"80 GB HBM3: {DATASHEET}",
        "interconnect_bw": f"NVLink 4 900 GB/s both ways = 450 GB/s each way: {DATASHEET}",
        "compute_efficiency": f"H100 prefill MFU 0.45: {BLIS}",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(132, 794.5e12, 1402.6e12, 0.75, (
        ("num_sms", "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (SXM5)"),
        ("mamf_bf16", f"H100 SXM 794.5 TFLOP/s bf16: {MAMF}"),
        ("mamf_fp8", f"H100 SXM 1402.6 TFLOP/s fp8 e4m3: {MAMF}"),
        ("attention_fraction", FA3))),
    network=NodeNetwork(8, 50e9, DGX8_400G),
)
