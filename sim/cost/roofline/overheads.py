"""`Overheads`: the roofline's fixed CPU seconds per step and per decoder layer (scheduling
and kernel launches), from BLIS's measurement (OVERHEAD_SOURCE)."""

from __future__ import annotations

import math
from dataclasses import dataclass

OVERHEAD_SOURCE = ("BLIS: ~126 us per step + 32 us per layer of CPU/launch overhead "
                   "(reference/simulators.md §9)")


@dataclass(frozen=True)
class Overheads:
    """Fixed seconds per step and per decoder layer (defaults: OVERHEAD_SOURCE)."""

    per_step: float = 126e-6
    per_layer: float = 32e-6

    def __post_init__(self) -> None:
        for name in ("per_step", "per_layer"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Overheads.{name} must be a finite number >= 0, got {value!r}")
