"""AMD Instinct MI300X 192GB: datasheet figures, kernel-model constants, node network."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = "AMD Instinct MI300X data sheet (amd.com, instinct-mi300x-data-sheet.pdf)"

MI300X = Hardware(
    key="mi300x", name="AMD Instinct MI300X 192GB",
    flops_bf16=1307.4e12, flops_fp8=2614.9e12, flops_fp4=None, flops_fp32=163.4e12,
    mem_bw=5.3e12, mem_capacity=192e9, interconnect_bw=448e9,
    compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"1,307.4 TFLOP/s dense FP16/BF16 matrix: {DATASHEET}",
        "flops_fp8": f"2,614.9 TFLOP/s dense FP8 matrix: {DATASHEET}",
        "flops_fp4": f"none: CDNA 3 has no FP4 matrix cores ({DATASHEET} lists FP8 as the "
                     "narrowest); nvfp4 weights are refused",
        "flops_fp32": f"163.4 TFLOP/s FP32 vector: {DATASHEET}",
        "mem_bw": f"5.3 TB/s HBM3: {DATASHEET}",
        "mem_capacity": f"192 GB HBM3: {DATASHEET}",
        "interconnect_bw": f"7 Infinity Fabric links of 128 GB/s both ways -> 448 GB/s "
                           f"each way per GPU: {DATASHEET}",
        "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({BLIS})",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(304, 668.4e12, None, 0.51, (
        ("num_sms", "AMD Instinct MI300X data sheet: 304 compute units"),
        ("mamf_bf16", f"MI300X 668.4 TFLOP/s bf16 (ROCm 6.3, TunableOp): {MAMF}"),
        ("mamf_fp8", f"none measured ({MAMF} has an empty MI300X fp8 row): fp8 GEMMs are "
                     "priced at the bf16 MAMF"),
        ("attention_fraction", "assumption: the chip's bf16 MAMF fraction (0.51); no published "
                               "FlashAttention figure"))),
    network=NodeNetwork(8, 50e9, "MI300X platform reference design: 8 GPUs, one 400 Gb/s "
                                 "NIC per GPU"),
)
