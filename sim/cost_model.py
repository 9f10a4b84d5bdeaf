"""The cost-model interface: price one forward (`BatchShape`) in seconds, with a breakdown.

Implementations: `sim.roofline.RooflineCostModel` (from a model shape and a hardware entry),
`sim.calibrated.CalibratedCostModel` (fitted to step times exec measured), and
`ZeroCostModel` here, the null model (every step is free), a baseline and a test oracle.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.batch_shape import BatchShape

if TYPE_CHECKING:
    from shared.step_record import StepRecord

STEP_COST_PARTS = ("linear", "attention", "lm_head", "allreduce", "overhead")


class StepCost(NamedTuple):
    """Seconds per part of one forward; `total` is their sum."""

    linear: float = 0.0      # decoder-layer projections and MLP
    attention: float = 0.0   # score/softmax/value over the KV cache
    lm_head: float = 0.0     # logits for the pruned rows
    allreduce: float = 0.0   # tensor-parallel all-reduces
    overhead: float = 0.0    # fixed per-step and per-layer costs (launches, scheduling)

    @property
    def total(self) -> float:
        return float(sum(self))

    def parts(self) -> dict[str, float]:
        return dict(self._asdict())


class CostModel(ABC):
    """Contract: `step_cost(shape)` is a pure function of the shape (same shape, same cost),
    every part is finite and >= 0, and `step_time(shape) == step_cost(shape).total`."""

    @abstractmethod
    def step_cost(self, shape: BatchShape) -> StepCost: ...

    def step_time(self, shape: BatchShape) -> float:
        return self.step_cost(shape).total

    def decode_step_times(self, seq_lens: np.ndarray, padded_batch_size: int) -> Iterator[float]:
        """step_time of the decode steps of a batch whose seq_lens ([B], the step's token
        included) start at `seq_lens` and grow by one per step, lazily and without end.
        Models may override it with arithmetic that gives the identical floats."""
        for j in itertools.count():
            yield self.step_time(BatchShape.decode(seq_lens + j, padded_batch_size))


class ZeroCostModel(CostModel):
    """Every step costs nothing: the null model."""

    def step_cost(self, shape: BatchShape) -> StepCost:
        return StepCost()


def reprice(model: CostModel, records: Iterable[StepRecord]) -> np.ndarray:
    """[N] float64 seconds `model` gives each recorded step (its recorded batch re-priced)."""
    return np.array([model.step_time(BatchShape.from_step_record(r)) for r in records],
                    dtype=np.float64)
