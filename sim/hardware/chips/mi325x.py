"""AMD Instinct MI325X 256GB: datasheet figures, kernel-model constants, node network.

The MI300X's CDNA 3 compute with more and faster memory (HBM3E)."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = ("AMD Instinct MI325X specifications (amd.com/en/products/accelerators/instinct/"
             "mi300/mi325x.html), as tabulated in " + MAMF.split(",")[0] + " ('TFLOPS comparison "
             "table': the MI300X's compute, more memory)")

MI325X = Hardware(
    key="mi325x", name="AMD Instinct MI325X 256GB",
    flops_bf16=1307.4e12, flops_fp8=2614.9e12, flops_fp4=None, flops_fp32=163.4e12,
    mem_bw=6.0e12, mem_capacity=256e9, interconnect_bw=448e9,
    compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"1,307.4 TFLOP/s dense BF16 matrix (as MI300X): {DATASHEET}",
        "flops_fp8": f"2,614.9 TFLOP/s dense FP8 matrix (as MI300X): {DATASHEET}",
        "flops_fp4": f"none: CDNA 3 has no FP4 matrix cores ({DATASHEET}); nvfp4 weights are "
                     "refused",
        "flops_fp32": f"163.4 TFLOP/s FP32 vector: {DATASHEET}",
        "mem_bw": f"6.0 TB/s HBM3E: {DATASHEET}",
        "mem_capacity": f"256 GB HBM3E: {DATASHEET}",
        "interconnect_bw": "7 Infinity Fabric links of 128 GB/s both ways -> 448 GB/s each way "
                           "per GPU, the MI300X platform's (AMD Instinct MI325X specifications)",
        "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({BLIS})",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(304, 784.9e12, None, 0.60, (
        ("num_sms", "304 compute units (38 per XCD): ROCm documentation, 'AMD GPU "
                    "specifications' (rocm.docs.amd.com, reference/gpu-specs)"),
        ("mamf_bf16", f"MI325X 784.9 TFLOP/s bf16 (ROCm 6.2.4, TunableOp, 1000 W): {MAMF}"),
        ("mamf_fp8", f"none measured ({MAMF} has no MI325X fp8 row): fp8 GEMMs are priced at "
                     "the bf16 MAMF"),
        ("attention_fraction", "assumption: the chip's bf16 MAMF fraction (784.9 / 1307.4 = "
                               "0.60); no published FlashAttention figure"))),
    network=NodeNetwork(8, 50e9, "assumption: the MI300X platform's reference design, 8 GPUs "
                                 "and one 400 Gb/s NIC per GPU"),
)
