"""`gemm_time`: seconds one GEMM [m, k] x [k, n] takes on a GPU, from its shape.

A GEMM kernel covers the output with tiles of tm x tn, one per streaming multiprocessor at a
time; the tiles run in waves of `num_sms`. The last wave of a grid that does not divide the
SM count runs partly idle, and a tile that overhangs m or n computes padding: both are lost
throughput, which is why small and odd shapes run far below peak and large ones approach
the chip's maximum achievable matmul rate (MAMF, measured by a shape sweep). Tiles are 128
rows (64 for m <= 64, the decode GEMMs) by 128 or 256 columns, the tensor-core kernels'
shapes. When a grid is smaller than the SM count, kernels split K over up to
num_sms / tiles units (split-K), paying one extra pass over the [m, n] output per split.
The kernel picks the tile and split that finish first, as cuBLAS's heuristics aim to.

    compute = waves * tile FLOPs / (MAMF / num_sms)          (per SM rate)
    memory  = (n k weight bytes + m k + m n (x splits) activation bytes) / memory rate
    time    = max(compute, memory) + kernel latency

Shapes: m rows (tokens), n output features, k input features (per tensor-parallel rank).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SMALL_M = 64
SMALL_M_TILES = ((64, 128), (64, 256))                  # (tile_m, tile_n)
TILES = ((128, 128), (128, 256), (256, 128))
SPLITS = (1, 2, 4, 8, 16)
MIN_SPLIT_K = 256   # NOTE: a split narrower than this leaves the tile's K loop too short to pipeline


@dataclass(frozen=True)
class GemmChip:
    """What a GEMM's time depends on, for one chip and dtype: its SM count, the achievable
    matmul FLOP/s (MAMF) at the dtype, the achieved memory bandwidth, and the fixed time
    one kernel takes to start and drain."""

    num_sms: int
    mamf: float            # FLOP/s
    memory_rate: float     # bytes/s
    kernel_latency: float  # seconds


@dataclass(frozen=True)
class GemmTime:
    """One GEMM's priced time and its parts (seconds)."""

    compute: float
    memory: float
    latency: float

    @property
    def total(self) -> float:
        return max(self.compute, self.memory) + self.latency


def gemm_time(chip: GemmChip, m: int, n: int, k: int, weight_bytes: float,
              act_bytes: float, groups: float = 1.0) -> GemmTime:
    """The fastest tile and split-K for this shape; `weight_bytes` / `act_bytes` are bytes
    per value of the [n, k] weight and of the activations. `groups`: a grouped GEMM (a MoE
    layer's experts) of that many [m, k] x [k, n] problems in one kernel."""
    if m <= 0 or groups <= 0:
        return GemmTime(0.0, 0.0, 0.0)
    tiles = SMALL_M_TILES if m <= SMALL_M else TILES
    return min((_candidate(chip, m, n, k, t, s, weight_bytes, act_bytes, groups)
                for t in tiles for s in SPLITS if _can_split(chip, m, n, k, t, s, groups)),
               key=lambda g: g.total)


def _can_split(chip: GemmChip, m: float, n: int, k: int, tile: tuple[int, int], split: int,
               groups: float) -> bool:
    """Split-K only fills SMs a smaller grid leaves idle, and keeps each split's K long."""
    if split == 1:
        return True
    grid = groups * math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    return grid * split <= chip.num_sms and k // split >= MIN_SPLIT_K


def _candidate(chip: GemmChip, m: int, n: int, k: int, tile: tuple[int, int], split: int,
               weight_bytes: float, act_bytes: float, groups: float) -> GemmTime:
    tm, tn = tile
    units = math.ceil(groups * math.ceil(m / tm) * math.ceil(n / tn) * split)
    waves = math.ceil(units / chip.num_sms)
    per_sm = chip.mamf / chip.num_sms
    compute = waves * 2.0 * tm * tn * (k / split) / per_sm
    traffic = groups * (n * k * weight_bytes + m * k * act_bytes + m * n * act_bytes * split)
    return GemmTime(compute, traffic / chip.memory_rate, chip.kernel_latency)


def gemm_rows(m):
    """The rows a GEMM of m rows computes (an int, or elementwise over an int array): whole
    64-row tiles, the smallest `gemm_time` runs (the roofline's tile padding: 129 rows
    compute as 192)."""
    tile = SMALL_M_TILES[0][0]
    padded = -(-m // tile) * tile
    return padded if isinstance(m, np.ndarray) else int(padded)


def gemm_efficiency(chip: GemmChip, m: int, n: int, k: int, weight_bytes: float = 2.0,
                    act_bytes: float = 2.0) -> float:
    """Achieved FLOP/s of the GEMM as a fraction of MAMF (1.0: a large, aligned shape)."""
    t = gemm_time(chip, m, n, k, weight_bytes, act_bytes)
    return 2.0 * m * n * k / t.total / chip.mamf
