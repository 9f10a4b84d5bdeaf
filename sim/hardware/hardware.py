"""A chip: peak FLOP/s, memory, interconnect and achieved-efficiency factors, with the source
of every number (ARCHITECTURE §5; numbers from reference/simulators.md §8), and in the same
entry its kernel-model constants (`kernels`: `sim.hardware.chip_kernels.ChipKernels`, or None
for a roofline-only chip, which the kernel cost model refuses) and its node network
(`network`: `sim.hardware.cluster_network.NodeNetwork`). The built-in chips are one file each
under `sim/hardware/chips/`, collected in `sim.hardware.catalogue.CATALOGUE`.

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
Two optional sections: `"kernels": {"num_sms", "mamf_bf16", "mamf_fp8", "mamf_fp4",
"attention_fraction", "sources": {field: source}}` and `"network": {"gpus_per_node",
"nic_bw", "source"}`. An entry with a base inherits the base's sections, and a section it
gives overrides the fields it names (a changed number without a source is sourced to the
file); `"kernels": null` makes it roofline-only. An entry without a base and without
"kernels" is roofline-only; without "network" it gets `DEFAULT_NETWORK` (8 GPUs per node,
one 200 Gb/s NIC per GPU).

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

from sim.hardware.chip_kernels import KERNEL_FIELDS, ChipKernels
from sim.hardware.cluster_network import NETWORK_FIELDS, NodeNetwork

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
    """One accelerator. Every number in NUMBER_FIELDS has an entry in `sources`; `kernels`
    None: roofline-only. `network` and `kernels` may be given as mappings of their fields."""

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
    network: NodeNetwork              # GPUs per node and each GPU's network card
    kernels: ChipKernels | None       # the kernel cost model's constants; None: roofline-only
    low_confidence: bool = False
    flops_fp4: float | None = None    # dense fp4 (NVFP4) tensor FLOP/s; None: no fp4 units

    def __post_init__(self) -> None:
        sources = dict(self.sources.items() if isinstance(self.sources, Mapping) else self.sources)
        if self.flops_fp4 is None:
            sources.setdefault("flops_fp4", NO_FP4_SOURCE)
        object.__setattr__(self, "sources", tuple(sorted(sources.items())))
        object.__setattr__(self, "network", _section(NodeNetwork, NETWORK_FIELDS, self.network))
        if self.kernels is not None:
            object.__setattr__(self, "kernels",
                               _section(ChipKernels, (*KERNEL_FIELDS, "sources"), self.kernels))
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
        """The entry as plain data (the JSON entry format, with its key)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**fields, "sources": dict(self.sources), "network": self.network.to_dict(),
                "kernels": None if self.kernels is None else self.kernels.to_dict()}


def _section(kind: type, names: tuple[str, ...], value: Any) -> Any:
    """`value` as a `kind` (a NodeNetwork or ChipKernels), built from a mapping of its fields."""
    if isinstance(value, kind):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{kind.__name__} must be given as an object of "
                         f"{', '.join(names)}, got {type(value).__name__}")
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise ValueError(f"unknown {kind.__name__} fields {unknown}; fields: {', '.join(names)}")
    missing = [f.name for f in dataclasses.fields(kind)
               if f.default is dataclasses.MISSING and f.name not in value]
    if missing:
        raise ValueError(f"{kind.__name__} is missing fields {missing}")
    return kind(**value)


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


