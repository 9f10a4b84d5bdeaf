"""What this machine achieves: streaming memory bandwidth and matrix-multiply FLOP/s, measured
with torch, and the simulator hardware entry built from them ("this machine", ARCHITECTURE §5:
it comes from measurement, never typed in).

The entry's numbers are achieved rates, so its efficiency factors are 1.0. The roofline
prices a step with them; the calibrated cost model (`batchtwin calibrate`) is what predicts
the real executor's step times.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from experiments.bench.cpu_info import cpu_model

THIS_MACHINE_KEY = "this-machine"
INTERCONNECT_PLACEHOLDER_BW = 1e9   # one host, no tensor parallelism: never priced at tp=1


class MachineRates(NamedTuple):
    """Achieved rates: bytes/s of a streaming read, FLOP/s of a square matmul per dtype."""

    mem_bw: float
    flops_fp32: float
    flops_bf16: float
    threads: int
    device: str


def measure_bandwidth(device: str, nbytes: int = 1 << 29, repeats: int = 5) -> float:
    """Bytes/s of a streaming read (sum over a large float32 tensor), best of `repeats`."""
    x = torch.ones(nbytes // 4, device=device)
    x.sum()
    best = min(timed(lambda: x.sum(), device) for _ in range(repeats))
    return nbytes / best


def measure_matmul_flops(device: str, dtype: torch.dtype, n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of an [n, n] x [n, n] matmul (2 n^3 FLOPs), best of `repeats`."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b
    best = min(timed(lambda: a @ b, device) for _ in range(repeats))
    return 2 * n**3 / best


def timed(fn: Callable[[], Any], device: str) -> float:
    """Seconds one call of `fn` takes (synchronising CUDA around it)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def measure_machine(device: str = "cpu") -> MachineRates:
    return MachineRates(measure_bandwidth(device), measure_matmul_flops(device, torch.float32),
                        measure_matmul_flops(device, torch.bfloat16), torch.get_num_threads(),
                        device)


def hardware_entry(rates: MachineRates, when: str) -> dict[str, Any]:
    """A hardware JSON entry (`sim.hardware.lookup.load_hardware_file` format) for these rates."""
    how = (f"measured by batchtwin calibrate on {when}, {rates.device} "
           f"({cpu_model()}), {rates.threads} threads")
    number = {
        "flops_bf16": (rates.flops_bf16, f"{how}: 1024x1024 bf16 torch matmul, best of 5"),
        "flops_fp32": (rates.flops_fp32, f"{how}: 1024x1024 fp32 torch matmul, best of 5"),
        "mem_bw": (rates.mem_bw, f"{how}: streaming sum over 512 MiB, best of 5"),
        "mem_capacity": (float(host_memory_bytes()), f"{how}: os.sysconf physical pages"),
        "interconnect_bw": (INTERCONNECT_PLACEHOLDER_BW, "placeholder: one host, no TP links"),
        "compute_efficiency": (1.0, "the FLOP/s above are achieved, not peak"),
        "memory_efficiency": (1.0, "the bandwidth above is achieved, not peak"),
        "interconnect_efficiency": (1.0, "placeholder: one host, no TP links"),
    }
    entry: dict[str, Any] = {k: v for k, (v, _) in number.items()}
    entry.update(name=f"this machine ({platform.node() or 'host'}, {rates.device})",
                 flops_fp8=None, low_confidence=False,
                 sources={"flops_fp8": "not measured (None: no fp8 matmul on this path)",
                          **{k: s for k, (_, s) in number.items()}})
    return {THIS_MACHINE_KEY: entry}


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
