"""`CalibratedCostModel`: step time as a non-negative linear model over features of the
batch shape, fitted to step durations a real executor measured (teacher forcing: the
recorded batches, re-priced).

Features (FEATURES), each per step: a constant; token rows through the layers; decode rows
(1-token requests and padding); the KV rows and the query-key pairs of attention as a dense
padded layout computes them (`BatchShape.padded_attention`: what exec's torch executor does;
for a varlen kernel they are the sums of the real lengths, within 2x); LM-head rows. Coefficients are seconds per unit, fitted by non-negative least squares on relative
error (each step's residual divided by its duration, so short decode steps count as much as
long prefills). Saved as JSON with the feature names, the source and the fit's MAPE.

A linear model cannot express the roofline's max(compute, memory): fit it on steps from the
regime you will simulate.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.cost.base import CostModel, StepCost
from sim.cost.batch_shape import BatchShape

if TYPE_CHECKING:
    from shared.trace.step_record import StepRecord

FORMAT = "batchtwin-calibrated-cost/2"
FEATURES = ("constant", "tokens", "decode_rows", "gathered_kv_tokens", "padded_attention_pairs",
            "lm_head_rows")
FEATURE_PARTS = MappingProxyType({
    "constant": "overhead", "tokens": "linear", "decode_rows": "overhead",
    "gathered_kv_tokens": "attention", "padded_attention_pairs": "attention",
    "lm_head_rows": "lm_head",
})


def shape_features(shape: BatchShape) -> np.ndarray:
    """[len(FEATURES)] float64 feature values of one step (padding rows included)."""
    attention = shape.padded_attention
    return np.array([1.0, shape.rows, shape.decode_rows, attention.gathered_keys,
                     attention.padded_pairs, shape.padded_lm_head_rows], dtype=np.float64)


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """argmin ||a x - b||_2 subject to x >= 0 (Lawson-Hanson active set). [m, n], [m] -> [n]."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(np.float64).eps * np.linalg.norm(a, 1) * max(a.shape)
    for _ in range(max_iter or 3 * n + 10):
        w = a.T @ (b - a @ x)                    # [n] negative gradient
        candidates = ~passive & (w > tol)
        if not candidates.any():
            break
        passive[np.argmax(np.where(candidates, w, -np.inf))] = True
        x, passive = _solve_passive(a, b, x, passive, tol)
    return x


def _solve_passive(a: np.ndarray, b: np.ndarray, x: np.ndarray, passive: np.ndarray,
                   tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Least squares on the passive set, stepping back toward x until all of it is positive."""
    while passive.any():
        z = np.zeros_like(x)
        z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
        if np.all(z[passive] > tol):
            return z, passive
        bad = passive & (z <= tol)
        step = x[bad] - z[bad]
        alpha = np.min(np.where(step > 0, x[bad] / np.where(step > 0, step, 1), 0.0))
        x = x + alpha * (z - x)
        passive = passive & (x > tol)
        x = np.where(passive, x, 0.0)
    return x, passive


@dataclass(frozen=True)
class CalibratedCostModel(CostModel):
    coefficients: tuple[float, ...]    # seconds per unit of each feature, FEATURES order
    source: str = ""                   # what was measured: executor, device, model, date
    num_records: int = 0
    fit_mape: float | None = None      # mean |predicted - measured| / measured on the fit set
    features: tuple[str, ...] = FEATURES

    def __post_init__(self) -> None:
        object.__setattr__(self, "coefficients", tuple(float(c) for c in self.coefficients))
        object.__setattr__(self, "features", tuple(self.features))
        if self.features != FEATURES:
            raise ValueError(f"features {list(self.features)} do not match this version's "
                             f"{list(FEATURES)}")
        if len(self.coefficients) != len(FEATURES):
            raise ValueError(f"{len(self.coefficients)} coefficients for {len(FEATURES)} features")
        if not all(math.isfinite(c) and c >= 0 for c in self.coefficients):
            raise ValueError(f"coefficients must be finite and >= 0, got {self.coefficients}")

    def contributions(self, shape: BatchShape) -> dict[str, float]:
        """Seconds each feature adds to this step."""
        values = shape_features(shape) * np.asarray(self.coefficients)
        return dict(zip(FEATURES, values.tolist(), strict=True))

    def describe(self) -> str:
        return f"calibrated({self.source or 'unknown source'})"

    def step_cost(self, shape: BatchShape) -> StepCost:
        parts = dict.fromkeys(StepCost._fields, 0.0)
        for name, seconds in self.contributions(shape).items():
            parts[FEATURE_PARTS[name]] += seconds
        return StepCost(**parts)

    @classmethod
    def fit(cls, records: Iterable[StepRecord], source: str = "") -> CalibratedCostModel:
        """Fit to recorded steps and their measured `duration`s (seconds, > 0)."""
        records = list(records)
        shapes = [BatchShape.from_step_record(r) for r in records]
        return cls.fit_shapes(shapes, [r.duration for r in records],
                              source or f"fitted to {len(records)} step records")

    @classmethod
    def fit_shapes(cls, shapes: Sequence[BatchShape], durations: Sequence[float],
                   source: str = "") -> CalibratedCostModel:
        """Fit to shapes and their measured durations (seconds, > 0)."""
        x = np.stack([shape_features(s) for s in shapes]) if shapes else np.zeros((0, 0))
        y = np.asarray(durations, dtype=np.float64)
        _check_fit_input(x, y)
        coef = _relative_nnls(x, y)
        mape = float(np.mean(np.abs(x @ coef - y) / y))
        return cls(tuple(coef.tolist()), source or f"fitted to {len(y)} steps", len(y), mape)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "features": list(self.features),
                "coefficients": dict(zip(self.features, self.coefficients, strict=True)),
                "units": "seconds per unit of feature", "source": self.source,
                "num_records": self.num_records, "fit_mape": self.fit_mape}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CalibratedCostModel:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a calibrated cost model: format {d.get('format')!r}, "
                             f"expected {FORMAT!r}")
        features = tuple(d["features"])
        coefficients = d["coefficients"]
        if set(coefficients) != set(features):
            raise ValueError(f"coefficients {sorted(coefficients)} do not match features "
                             f"{list(features)}")
        return cls(tuple(coefficients[f] for f in features), d.get("source", ""),
                   d.get("num_records", 0), d.get("fit_mape"), features)

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibratedCostModel:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object")
        return cls.from_dict(data)


def _check_fit_input(x: np.ndarray, y: np.ndarray) -> None:
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{x.shape[0]} shapes but {y.shape[0]} durations")
    if x.shape[0] < len(FEATURES):
        raise ValueError(f"need at least {len(FEATURES)} measured steps to fit "
                         f"{len(FEATURES)} coefficients, got {x.shape[0]}")
    if not np.all(np.isfinite(y) & (y > 0)):
        raise ValueError("every measured duration must be a finite number of seconds > 0")


def _relative_nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising sum(((x @ c) - y) / y)^2; columns are scaled to
    unit max for conditioning, and all-zero features get coefficient 0."""
    a = x / y[:, None]
    scale = np.abs(a).max(axis=0)
    live = scale > 0
    coef = np.zeros(x.shape[1])
    coef[live] = nnls(a[:, live] / scale[live], np.ones(len(y))) / scale[live]
    return coef
