"""NVIDIA A100-SXM4-80GB: datasheet figures, kernel-model constants, node network."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = ("NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) via "
             "glennklockwood.com/garden/processors/A100")
FA2 = ("FlashAttention-2 (Dao 2023, arXiv 2307.08691): forward reaches up to 73% of A100's "
       "peak at long sequences")

A100_80G = Hardware(
    key="a100-80g", name="NVIDIA A100-SXM4-80GB",
    flops_bf16=312e12, flops_fp8=None, flops_fp4=None, flops_fp32=19.5e12,
    mem_bw=2.039e12, mem_capacity=80e9, interconnect_bw=300e9,
    compute_efficiency=0.38, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"312 TFLOP/s dense BF16 tensor: {DATASHEET}",
        "flops_fp8": f"none: Ampere has no FP8 tensor cores ({DATASHEET} lists no FP8); "
                     "fp8 weights are priced weight-only at the bf16 rate",
        "flops_fp4": f"none: Ampere has no FP4 tensor cores ({DATASHEET} lists no FP4); "
                     "nvfp4 weights are refused",
        "flops_fp32": f"19.5 TFLOP/s FP32 (non-tensor): {DATASHEET}",
        "mem_bw": f"2.039 TB/s HBM2e (SXM4 80G): {DATASHEET}",
        "mem_capacity": f"80 GB HBM2e: {DATASHEET}",
        "interconnect_bw": f"NVLink 3 '300+300 GB/s' (600 GB/s both ways): {DATASHEET}",
        "compute_efficiency": f"A100 prefill MFU 0.38: {BLIS}",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(108, 271.2e12, None, 0.73, (
        ("num_sms", "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs (SXM4)"),
        ("mamf_bf16", f"A100 SXM 271.2 TFLOP/s bf16: {MAMF}"),
        ("attention_fraction", FA2))),
    network=NodeNetwork(8, 25e9, "DGX A100 user guide: 8 GPUs, one ConnectX-6 200 Gb/s "
                                 "(25 GB/s) NIC per GPU"),
)
