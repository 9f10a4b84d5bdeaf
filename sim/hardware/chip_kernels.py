"""`ChipKernels`: what the kernel-level cost model (`sim.cost.kernel.model`) needs of a chip
beyond its datasheet peaks: its SM count (tiles run in waves of it), the maximum achievable
matmul FLOP/s at bf16, fp8 and fp4 (MAMF: the best of a shape sweep, which no real kernel
beats), and the fraction of the bf16 peak a FlashAttention forward reaches on long
sequences. Every number given has its source (`sources`, field -> source).

A chip's `Hardware` entry holds its `ChipKernels` (`Hardware.kernels`); None there means the
chip is roofline-only and the kernel cost model refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KERNEL_FIELDS = ("num_sms", "mamf_bf16", "mamf_fp8", "mamf_fp4", "attention_fraction")
OPTIONAL_KERNEL_FIELDS = ("mamf_fp8", "mamf_fp4")


@dataclass(frozen=True)
class ChipKernels:
    num_sms: int
    mamf_bf16: float          # FLOP/s
    mamf_fp8: float | None    # FLOP/s; None: no fp8 tensor cores, or no measurement (fp8
                              # GEMMs then priced at the bf16 MAMF)
    attention_fraction: float  # FlashAttention forward FLOP/s / bf16 peak, long sequences
    sources: tuple[tuple[str, str], ...]
    mamf_fp4: float | None = None  # FLOP/s of NVFP4 (W4A4) GEMMs; None: no fp4 tensor cores

    def __post_init__(self) -> None:
        sources = self.sources.items() if isinstance(self.sources, Mapping) else self.sources
        object.__setattr__(self, "sources", tuple(sorted(sources)))
        if isinstance(self.num_sms, bool) or not isinstance(self.num_sms, int) \
                or self.num_sms < 1:
            raise ValueError(f"kernels.num_sms must be an integer >= 1, got {self.num_sms!r}")
        for name in KERNEL_FIELDS[1:]:
            _check_rate(name, getattr(self, name), name in OPTIONAL_KERNEL_FIELDS)
        if self.attention_fraction > 1:
            raise ValueError(f"kernels.attention_fraction is a fraction of the bf16 peak in "
                             f"(0, 1], got {self.attention_fraction!r}")
        _check_sources(self)

    def source(self, field: str) -> str:
        """Where the number in `field` comes from."""
        return dict(self.sources)[field]

    def mamf(self, dtype: str) -> float | None:
        """The achievable matmul FLOP/s of a GEMM in `dtype` ("fp8", "nvfp4" or the 16-bit
        ones); None where the chip has no figure for fp8 or nvfp4."""
        if dtype == "fp8":
            return self.mamf_fp8
        return self.mamf_fp4 if dtype == "nvfp4" else self.mamf_bf16

    def to_dict(self) -> dict[str, Any]:
        return {**{n: getattr(self, n) for n in KERNEL_FIELDS}, "sources": dict(self.sources)}


def _check_rate(name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"kernels.{name} must be a positive number, got {value!r}")


def _check_sources(chip: ChipKernels) -> None:
    sources = dict(chip.sources)
    missing = [n for n in KERNEL_FIELDS
               if getattr(chip, n) is not None and not str(sources.get(n, "")).strip()]
    if missing:
        raise ValueError(f"no source for kernels.{', kernels.'.join(missing)}: every number "
                         f"needs one")
    extra = sorted(set(sources) - set(KERNEL_FIELDS))
    if extra:
        raise ValueError(f"kernels.sources name unknown fields {extra}; fields: "
                         f"{', '.join(KERNEL_FIELDS)}")
