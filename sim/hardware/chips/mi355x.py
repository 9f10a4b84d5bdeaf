"""AMD Instinct MI355X 288GB: datasheet figures, kernel-model constants, node network.

CDNA 4: 256 compute units at up to 2,400 MHz, each matrix core twice CDNA 3's FMAs per clock,
and FP4/FP6 matrix cores (the OCP MX formats)."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS, MAMF
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

DATASHEET = ("AMD Instinct MI355X specifications (amd.com/en/products/accelerators/instinct/"
             "mi350/mi355x.html), as tabulated in " + MAMF.split(",")[0] + " ('TFLOPS comparison "
             "table', dense figures)")

MI355X = Hardware(
    key="mi355x", name="AMD Instinct MI355X 288GB",
    flops_bf16=2516.6e12, flops_fp8=5033.2e12, flops_fp4=10066.3e12, flops_fp32=157.3e12,
    mem_bw=8.0e12, mem_capacity=288e9, interconnect_bw=448e9,
    compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
    sources={
        "flops_bf16": f"2,516.6 TFLOP/s dense BF16 matrix: 2,400 MHz x 512 FMAs x 2 x 1,024 "
                      f"matrix cores (AMD publishes 2.5 PFLOPS): {DATASHEET}",
        "flops_fp8": f"5,033.2 TFLOP/s dense FP8 matrix, twice BF16 (AMD: 5.0 PFLOPS): {DATASHEET}",
        "flops_fp4": f"10,066.3 TFLOP/s dense MXFP4 matrix, four times BF16 (AMD: 10.1 PFLOPS); "
                     f"NOTE: the OCP MX format's rate, which an nvfp4 run is priced at too: "
                     f"{DATASHEET}",
        "flops_fp32": f"157.3 TFLOP/s FP32 vector: {DATASHEET}",
        "mem_bw": f"8.0 TB/s HBM3E: {DATASHEET}",
        "mem_capacity": f"288 GB HBM3E: {DATASHEET}",
        "interconnect_bw": "assumption: the MI300X platform's 7 Infinity Fabric links, 448 GB/s "
                           "each way per GPU (the MI355X link rate not confirmed here)",
        "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({BLIS})",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(256, 1565.0e12, None, 0.62, (
        ("num_sms", "256 compute units (32 per XCD): ROCm documentation, 'AMD GPU "
                    "specifications' (rocm.docs.amd.com, reference/gpu-specs)"),
        ("mamf_bf16", f"MI355X 1,565.0 TFLOP/s bf16 (ROCm 7.0.2, TunableOp off): {MAMF}"),
        ("mamf_fp8", f"none measured ({MAMF} has no MI355X fp8 row): fp8 GEMMs are priced at "
                     "the bf16 MAMF"),
        ("attention_fraction", "assumption: the chip's bf16 MAMF fraction (1565.0 / 2516.6 = "
                               "0.62); no published FlashAttention figure"))),
    network=NodeNetwork(8, 50e9, "assumption: the MI300X platform's reference design, 8 GPUs "
                                 "and one 400 Gb/s NIC per GPU"),
)
