"""`--fit NAME=V1,V2,...`: choose the kernel cost model's cross-chip constants
(`sim.cost.kernel.params.KernelParams` fields) once, for the whole set: every point of the grid
is scored by the median |error| over the rows of the fit half of the source split
(`sources.HALVES["A"]`); the best point is then reported on every row, so the other half's
error is a held-out check of the fit."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from statistics import median

from experiments.published_check.predict import predict_all
from experiments.published_check.row_spec import RowSpec
from experiments.published_check.sources import half_of
from sim.cost.kernel.params import KernelParams

FIT_HALF = "A"


def parse_grid(items: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """{"memory_efficiency": (0.6, 0.7)} from ["memory_efficiency=0.6,0.7"]; ValueError
    naming an unknown field or a value that is not a number."""
    names = {f.name for f in dataclasses.fields(KernelParams)}
    grid = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in names:
            raise ValueError(f"--fit {item!r}: {name!r} is not a KernelParams field "
                             f"({', '.join(sorted(names))})")
        try:
            grid[name] = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise ValueError(f"--fit {item!r}: values must be numbers") from None
    return grid


def fit(specs: Sequence[RowSpec], grid: dict[str, tuple[float, ...]], jobs: int
        ) -> tuple[KernelParams, list[tuple[KernelParams, float]]]:
    """(best params, every grid point with its fit-half median |error| in percent)."""
    fit_rows = [s for s in specs if half_of(s.source) == FIT_HALF]
    points = [KernelParams(**dict(zip(grid, values, strict=True)))
              for values in itertools.product(*grid.values())]
    runs = [s.with_cost_model("kernel", p) for p in points for s in fit_rows]
    predictions = predict_all(runs, jobs)
    scores = []
    for i, p in enumerate(points):
        chunk = predictions[i * len(fit_rows):(i + 1) * len(fit_rows)]
        errors = [abs(pr.predicted - s.published) / s.published * 100
                  for pr, s in zip(chunk, fit_rows, strict=True)]
        scores.append((p, median(errors)))
    return min(scores, key=lambda ps: ps[1])[0], scores
