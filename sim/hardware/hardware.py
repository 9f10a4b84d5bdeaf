"""The hardware catalogue: peak FLOP/s, memory, interconnect and achieved-efficiency factors,
with the source of every number (ARCHITECTURE §5; numbers from reference/simulators.md §8).

Units are SI: FLOP/s, bytes/s, bytes (1 GB = 1e9 bytes, vendor convention). FLOP/s are dense
(no 2:4 sparsity). `interconnect_bw` is the per-GPU bandwidth in one direction (NVIDIA quotes
both directions added: H100's "900 GB/s NVLink" is 450 GB/s each way), which is what a ring
all-reduce moves data at. `None` for a peak means the chip has no such unit (A100 has no FP8
tensor cores, Hopper no FP4) or no figure is known; its source says which.

Users add or override entries in a JSON file: a top-level object mapping key -> entry, whose
fields are the `Hardware` field names (SI units), plus an optional `"base": "<known key>"` to
start from an existing entry. An entry whose key is already known overrides that entry's
fields. A number changed without a source is sourced to the file it came from.
`flops_fp4` may be left out (None: no FP4 tensor cores, with NO_FP4_SOURCE as its source).

There is no "this machine" entry: a machine's own numbers come from calibration
(`sim.cost.calibrated.CalibratedCostModel.fit` on exec's step records), never typed in here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

PEAK_FIELDS = ("flops_bf16", "flops_fp8", "flops_fp4", "flops_fp32")
OPTIONAL_FIELDS = ("flops_fp8", "flops_fp4", "flops_fp32")
# The peak field a GEMM in each canonical dtype runs at (nvfp4: W4A4 on FP4 tensor cores).
PEAK_FIELD = MappingProxyType({"bf16": "flops_bf16", "fp16": "flops_bf16", "fp8": "flops_fp8",
                               "nvfp4": "flops_fp4", "fp32": "flops_fp32"})
NO_FP4_SOURCE = "none given: flops_fp4 left out of the entry (no FP4 tensor cores)"
EFFICIENCY_FIELDS = ("compute_efficiency", "memory_efficiency", "interconnect_efficiency")
NUMBER_FIELDS = (*PEAK_FIELDS, "mem_bw", "mem_capacity", "interconnect_bw", *EFFICIENCY_FIELDS)
CALIBRATED_KEYS = ("this-machine", "local", "calibrated")


class Efficiencies(NamedTuple):
    """Achieved fractions of peak: GEMM/attention FLOP/s, HBM bandwidth, interconnect."""

    compute: float
    memory: float
    interconnect: float


@dataclass(frozen=True)
class Hardware:
    """One accelerator. Every number in NUMBER_FIELDS has an entry in `sources`."""

    key: str
    name: str
    flops_bf16: float                 # dense bf16/fp16 tensor FLOP/s
    flops_fp8: float | None           # dense fp8 tensor FLOP/s; None: no fp8 units
    flops_fp32: float | None          # fp32 (non-tensor) FLOP/s; None: unknown
    mem_bw: float                     # HBM bytes/s
    mem_capacity: float               # HBM bytes
    interconnect_bw: float            # bytes/s per GPU, one direction
    compute_efficiency: float
    memory_efficiency: float
    interconnect_efficiency: float
    sources: tuple[tuple[str, str], ...]
    low_confidence: bool = False
    flops_fp4: float | None = None    # dense fp4 (NVFP4) tensor FLOP/s; None: no fp4 units

    def __post_init__(self) -> None:
        sources = dict(self.sources.items() if isinstance(self.sources, Mapping) else self.sources)
        if self.flops_fp4 is None:
            sources.setdefault("flops_fp4", NO_FP4_SOURCE)
        object.__setattr__(self, "sources", tuple(sorted(sources.items())))
        if not isinstance(self.name, str) or not isinstance(self.low_confidence, bool):
            raise ValueError(f"name must be a string and low_confidence a boolean, got "
                             f"{self.name!r}, {self.low_confidence!r}")
        for name in NUMBER_FIELDS:
            _check_number(name, getattr(self, name), optional=name in OPTIONAL_FIELDS,
                          at_most_one=name in EFFICIENCY_FIELDS)
        _check_sources(dict(self.sources))

    def source(self, field: str) -> str:
        """Where the number in `field` comes from."""
        return dict(self.sources)[field]

    @property
    def efficiencies(self) -> Efficiencies:
        return Efficiencies(self.compute_efficiency, self.memory_efficiency,
                            self.interconnect_efficiency)

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a canonical dtype name (bf16, fp16, fp8, nvfp4, fp32)."""
        if dtype not in PEAK_FIELD:
            raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(PEAK_FIELD)}")
        return getattr(self, PEAK_FIELD[dtype])

    def ridge_point(self, dtype: str = "bf16") -> float:
        """FLOP per byte where compute and bandwidth limits meet (peak numbers)."""
        return (self.peak_flops(dtype) or math.nan) / self.mem_bw

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "sources": dict(self.sources)}


def _check_number(name: str, value: Any, optional: bool, at_most_one: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if at_most_one and value > 1:
        raise ValueError(f"{name} is a fraction of peak in (0, 1], got {value!r}")


def _check_sources(sources: dict[str, str]) -> None:
    missing = [n for n in NUMBER_FIELDS if not str(sources.get(n, "")).strip()]
    if missing:
        raise ValueError(f"no source for {', '.join(missing)}: every number needs one")
    extra = sorted(set(sources) - set(NUMBER_FIELDS))
    if extra:
        raise ValueError(f"sources name unknown fields {extra}; fields: {', '.join(NUMBER_FIELDS)}")


