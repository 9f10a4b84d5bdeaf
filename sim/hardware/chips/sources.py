"""Citations that several chips' entries quote (reference/simulators.md §8 unless said
otherwise); a chip's own datasheet sits in its file."""

from __future__ import annotations

BLIS = ("BLIS hardware_config.json MFU 'calibrated per discussion #589' "
        "(reference/simulators.md §8)")
ASSUMED_MEM = "assumption: 80% of peak HBM bandwidth in streaming GEMV/attention; calibrate"
ASSUMED_IC = ("assumption: 75% of one-direction link bandwidth as NCCL ring bus bandwidth; "
              "calibrate")
MAMF = ("stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul "
        "FLOPS comparison table' (mamf-finder.py shape sweeps)")
FA3 = ("FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608): up to 740 TFLOP/s bf16 on "
       "H100, 75% of peak")
DGX8_400G = "DGX user guide: 8 GPUs, one ConnectX-7 400 Gb/s (50 GB/s) NIC per GPU"
