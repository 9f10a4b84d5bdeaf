"""Huawei Ascend 910B2 (LOW CONFIDENCE: third-party figures): datasheet figures,
kernel-model constants, node network."""

from __future__ import annotations

from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.chips.sources import ASSUMED_IC, ASSUMED_MEM, BLIS
from sim.hardware.cluster_network import NodeNetwork
from sim.hardware.hardware import Hardware

ASCEND_910B = Hardware(
    key="910b", name="Huawei Ascend 910B2 (LOW CONFIDENCE)",
    flops_bf16=354e12, flops_fp8=None, flops_fp4=None, flops_fp32=None,
    mem_bw=1.6e12, mem_capacity=64e9, interconnect_bw=196e9,
    compute_efficiency=0.38, memory_efficiency=0.80, interconnect_efficiency=0.75,
    low_confidence=True,
    sources={
        "flops_bf16": "LOW CONFIDENCE: ~354 TFLOP/s FP16/BF16 cube (910B2; 910B3 ~295) from an "
                      "Ascend simulator's hardware table in public code (reference/simulators.md "
                      "§8); third-party pages say ~320; verify with an on-device GEMM",
        "flops_fp8": "none: 910B has no FP8 (FP8 arrives with Ascend 950, Huawei roadmap per "
                     "besthub.dev Ascend 910C->970 article)",
        "flops_fp4": "none: 910B has no FP4 (no FP8 either, see flops_fp8); nvfp4 weights "
                     "are refused",
        "flops_fp32": "unknown: no vendor FP32 figure found; add one in a JSON file",
        "mem_bw": "LOW CONFIDENCE: ~1.6 TB/s HBM2e (third-party pages quote 1.2-1.6 TB/s; "
                  "reference/simulators.md §8)",
        "mem_capacity": "LOW CONFIDENCE: 64 GB HBM2e (reference/simulators.md §8)",
        "interconnect_bw": "LOW CONFIDENCE: HCCS 784 GB/s for 910C (two 910B dies; besthub.dev "
                           "Ascend roadmap article) -> 392 GB/s per 910B both ways, 196 each way",
        "compute_efficiency": f"assumption: A100-class prefill MFU 0.38 ({BLIS})",
        "memory_efficiency": ASSUMED_MEM,
        "interconnect_efficiency": ASSUMED_IC,
    },
    kernels=ChipKernels(24, 0.38 * 354e12, None, 0.38, (
        ("num_sms", "LOW CONFIDENCE: 24 AI Cores (Ascend 910B2, vendor briefings)"),
        ("mamf_bf16", "LOW CONFIDENCE assumption: the catalogue's compute efficiency (0.38) "
                      "x the bf16 peak; no published matmul sweep"),
        ("attention_fraction", "LOW CONFIDENCE assumption: the catalogue's compute efficiency"))),
    network=NodeNetwork(8, 25e9, "Atlas 800T A2: 8 NPUs, 8 x 200 GE RoCE"),
)
