"""The built-in hardware entries (`sim.hardware.lookup.hardware_catalogue` reads them), each number
with its source; the entry type, the JSON override format and the checks are in
`sim.hardware.hardware`."""

from __future__ import annotations

from sim.hardware.hardware import Hardware

# Sources, quoted per number below (reference/simulators.md §8 unless said otherwise).
_A100 = ("NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) via "
         "glennklockwood.com/garden/processors/A100")
_H100 = ("NVIDIA H100 SXM5 datasheet ('shown with sparsity; 1/2 lower without') via "
         "glennklockwood.com/garden/processors/h100")
_H200 = "NVIDIA H200 SXM spec (lzwjava.github.io/nvidia-h200-gpu-specs-en; same GH100 die as H100)"
_MI300X = "AMD Instinct MI300X data sheet (amd.com, instinct-mi300x-data-sheet.pdf)"
_B200 = "NVIDIA HGX B200 (1000 W) figures via glennklockwood.com/garden/processors/B200"
_BLIS = ("BLIS hardware_config.json MFU 'calibrated per discussion #589' "
         "(reference/simulators.md §8)")
_ASSUMED_MEM = "assumption: 80% of peak HBM bandwidth in streaming GEMV/attention; calibrate"
_ASSUMED_IC = "assumption: 75% of one-direction link bandwidth as NCCL ring bus bandwidth; calibrate"

CATALOGUE = (
    Hardware(
        key="a100-80g", name="NVIDIA A100-SXM4-80GB",
        flops_bf16=312e12, flops_fp8=None, flops_fp4=None, flops_fp32=19.5e12,
        mem_bw=2.039e12, mem_capacity=80e9, interconnect_bw=300e9,
        compute_efficiency=0.38, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"312 TFLOP/s dense BF16 tensor: {_A100}",
            "flops_fp8": f"none: Ampere has no FP8 tensor cores ({_A100} lists no FP8); "
                         "fp8 weights are priced weight-only at the bf16 rate",
            "flops_fp4": f"none: Ampere has no FP4 tensor cores ({_A100} lists no FP4); "
                         "nvfp4 weights are refused",
            "flops_fp32": f"19.5 TFLOP/s FP32 (non-tensor): {_A100}",
            "mem_bw": f"2.039 TB/s HBM2e (SXM4 80G): {_A100}",
            "mem_capacity": f"80 GB HBM2e: {_A100}",
            "interconnect_bw": f"NVLink 3 '300+300 GB/s' (600 GB/s both ways): {_A100}",
            "compute_efficiency": f"A100 prefill MFU 0.38: {_BLIS}",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="h100", name="NVIDIA H100 SXM5 80GB",
        flops_bf16=989.4e12, flops_fp8=1978.9e12, flops_fp4=None, flops_fp32=66.9e12,
        mem_bw=3.35e12, mem_capacity=80e9, interconnect_bw=450e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"989.4 TFLOP/s dense BF16 (1,979 sparse): {_H100}",
            "flops_fp8": f"1,978.9 TFLOP/s dense FP8 (3,958 sparse): {_H100}",
            "flops_fp4": f"none: Hopper has no FP4 tensor cores ({_H100} lists FP8 as the "
                         "narrowest); nvfp4 weights are refused",
            "flops_fp32": f"66.9 TFLOP/s FP32 (non-tensor): {_H100}",
            "mem_bw": f"3.35 TB/s HBM3: {_H100}",
            "mem_capacity": f"80 GB HBM3: {_H100}",
            "interconnect_bw": f"NVLink 4 900 GB/s both ways = 450 GB/s each way: {_H100}",
            "compute_efficiency": f"H100 prefill MFU 0.45: {_BLIS}",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="h200", name="NVIDIA H200 SXM 141GB",
        flops_bf16=989.4e12, flops_fp8=1978.9e12, flops_fp4=None, flops_fp32=66.9e12,
        mem_bw=4.8e12, mem_capacity=141e9, interconnect_bw=450e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"989 TFLOP/s dense BF16, same GH100 compute as H100: {_H200}; {_H100}",
            "flops_fp8": f"3,958 TFLOP/s FP8 'with sparsity' -> 1,978.9 dense: {_H200}",
            "flops_fp4": f"none: Hopper (same GH100 die as H100) has no FP4 tensor cores "
                         f"({_H200} lists FP8 as the narrowest); nvfp4 weights are refused",
            "flops_fp32": f"same GH100 die as H100 (66.9 TFLOP/s FP32): {_H100}",
            "mem_bw": f"4.8 TB/s HBM3e: {_H200}",
            "mem_capacity": f"141 GB HBM3e: {_H200}",
            "interconnect_bw": f"NVLink 4 900 GB/s both ways = 450 GB/s each way: {_H200}",
            "compute_efficiency": f"H100's prefill MFU 0.45 (same compute die): {_BLIS}",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="b200", name="NVIDIA B200 (HGX, 1000 W)",
        flops_bf16=2250e12, flops_fp8=4500e12, flops_fp4=9000e12, flops_fp32=80e12,
        mem_bw=8.0e12, mem_capacity=180e9, interconnect_bw=900e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"2,250 TFLOP/s dense BF16 (4,500 sparse): {_B200}",
            "flops_fp8": f"4,500 TFLOP/s dense FP8 (9,000 sparse): {_B200}",
            "flops_fp4": f"9,000 TFLOP/s dense FP4 (18,000 sparse): {_B200}",
            "flops_fp32": f"80 TFLOP/s FP32 (non-tensor): {_B200}",
            "mem_bw": f"8 TB/s HBM3e: {_B200}",
            "mem_capacity": "180 GB usable of 192 GB raw HBM3e (reference/simulators.md §8; "
                            "docs.vultr.com inference cookbook sees 179 GB per GPU)",
            "interconnect_bw": f"NVLink 5 '2x 900 GB/s' (1.8 TB/s both ways): {_B200}",
            "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({_BLIS}); "
                                  "no published B200 figure",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
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
            "compute_efficiency": f"assumption: A100-class prefill MFU 0.38 ({_BLIS})",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
    Hardware(
        key="mi300x", name="AMD Instinct MI300X 192GB",
        flops_bf16=1307.4e12, flops_fp8=2614.9e12, flops_fp4=None, flops_fp32=163.4e12,
        mem_bw=5.3e12, mem_capacity=192e9, interconnect_bw=448e9,
        compute_efficiency=0.45, memory_efficiency=0.80, interconnect_efficiency=0.75,
        sources={
            "flops_bf16": f"1,307.4 TFLOP/s dense FP16/BF16 matrix: {_MI300X}",
            "flops_fp8": f"2,614.9 TFLOP/s dense FP8 matrix: {_MI300X}",
            "flops_fp4": f"none: CDNA 3 has no FP4 matrix cores ({_MI300X} lists FP8 as the "
                         "narrowest); nvfp4 weights are refused",
            "flops_fp32": f"163.4 TFLOP/s FP32 vector: {_MI300X}",
            "mem_bw": f"5.3 TB/s HBM3: {_MI300X}",
            "mem_capacity": f"192 GB HBM3: {_MI300X}",
            "interconnect_bw": f"7 Infinity Fabric links of 128 GB/s both ways -> 448 GB/s "
                               f"each way per GPU: {_MI300X}",
            "compute_efficiency": f"assumption: H100's prefill MFU 0.45 ({_BLIS})",
            "memory_efficiency": _ASSUMED_MEM,
            "interconnect_efficiency": _ASSUMED_IC,
        }),
)
