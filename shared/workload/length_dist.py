"""Length distributions for workload prompts and outputs: fixed, uniform, lognormal, empirical.

Every distribution is a frozen dataclass with `sample(rng, n) -> np.ndarray` (int64, shape
[n], every value >= 1) drawing only from the `numpy.random.Generator` passed in, and
`to_dict()` (JSON-ready, with a `kind` key) so a workload's config records what made it.
`as_length_dist(5)` reads a plain int as `Fixed(5)`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

EMPIRICAL_VALUES_IN_CONFIG = 1000  # above this, an empirical config names its file instead
_FIELD_SPLIT = re.compile(r"[,\s]+")


def _clip(x: np.ndarray, high: int | None) -> np.ndarray:
    out = np.maximum(np.asarray(x, dtype=np.int64), 1)
    return out if high is None else np.minimum(out, high)


@dataclass(frozen=True)
class Fixed:
    """Every sample is `value` (clipped to >= 1)."""

    value: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _clip(np.full(n, self.value), None)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "fixed", "value": self.value}


@dataclass(frozen=True)
class Uniform:
    """Integers uniform in [low, high], both inclusive (clipped to >= 1)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if self.high < self.low:
            raise ValueError(f"Uniform: high ({self.high}) must be >= low ({self.low})")

    @property
    def max_len(self) -> int:
        """The longest sample (what a request's max_new_tokens must allow)."""
        return max(self.high, 1)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _clip(rng.integers(self.low, self.high + 1, size=n), None)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "uniform", "low": self.low, "high": self.high}


@dataclass(frozen=True)
class LogNormal:
    """`round(exp(N(log(median), sigma)))`, clipped to [1, max_len].

    Parameterised by the median (not the mean): the mean is `median * exp(sigma**2 / 2)`.
    `max_len=None` leaves the tail unclipped."""

    median: float
    sigma: float
    max_len: int | None = None

    def __post_init__(self) -> None:
        if not self.median > 0 or not self.sigma >= 0:
            raise ValueError(f"LogNormal: need median > 0 and sigma >= 0, "
                             f"got median={self.median!r}, sigma={self.sigma!r}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return _clip(np.rint(x), self.max_len)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "lognormal", "median": self.median, "sigma": self.sigma,
                "max_len": self.max_len}


@dataclass(frozen=True)
class Empirical:
    """Lengths drawn with replacement from `values` (clipped to >= 1); `source` names the
    file they came from, if any."""

    values: tuple[int, ...]
    source: str | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"Empirical: no lengths (source={self.source!r})")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _clip(rng.choice(np.asarray(self.values, dtype=np.int64), size=n), None)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": "empirical", "source": self.source,
                             "num_values": len(self.values)}
        if self.source is None or len(self.values) <= EMPIRICAL_VALUES_IN_CONFIG:
            d["values"] = list(self.values)
        return d

    @classmethod
    def from_file(cls, path: str | Path, column: int | str | None = None) -> Empirical:
        """Integer lengths from a file. `.json`: a list of numbers. Otherwise text or CSV:
        without `column`, every comma/whitespace-separated number (a non-numeric first line
        is a header and skipped); with `column` (an index, or a header name), that CSV
        column only. Non-integral or non-numeric values raise ValueError."""
        text = Path(path).read_text()
        if Path(path).suffix.lower() == ".json":
            raw = json.loads(text)
        elif column is None:
            raw = _text_fields(text)
        else:
            raw = _csv_column(text, column)
        return cls(tuple(_as_int(v, path) for v in raw), str(path))


def _text_fields(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and not _is_number(_FIELD_SPLIT.split(lines[0].strip())[0]):
        lines = lines[1:]
    return [f for ln in lines for f in _FIELD_SPLIT.split(ln.strip()) if f]


def _csv_column(text: str, column: int | str) -> list[str]:
    rows = [r for r in csv.reader(text.splitlines()) if r]
    if isinstance(column, str):
        header = [c.strip() for c in rows[0]] if rows else []
        if column not in header:
            raise ValueError(f"no column {column!r} in header {header}")
        return [r[header.index(column)] for r in rows[1:]]
    start = 0 if rows and _is_number(rows[0][column]) else 1
    return [r[column] for r in rows[start:]]


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _as_int(v: Any, path: str | Path) -> int:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: length {v!r} is not a number") from None
    if not x.is_integer():
        raise ValueError(f"{path}: length {v!r} is not an integer")
    return int(x)


LengthDist: TypeAlias = Fixed | Uniform | LogNormal | Empirical


def as_length_dist(x: int | LengthDist) -> LengthDist:
    """A plain int is `Fixed(x)`; a distribution is returned as is."""
    if isinstance(x, (Fixed, Uniform, LogNormal, Empirical)):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return Fixed(int(x))
    raise TypeError(f"expected an int or a length distribution, got {x!r}")
