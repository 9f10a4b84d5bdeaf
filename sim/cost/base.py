"""The cost-model interface: price one forward (`BatchShape`) in seconds, with a breakdown.

Implementations: `sim.cost.roofline.model.RooflineCostModel` (from a model shape and a hardware entry),
`sim.cost.calibrated.CalibratedCostModel` (fitted to step times exec measured), and
`ZeroCostModel` here, the null model (every step is free), a baseline and a test oracle.

`step_bound(shape)` names what bounds a step (BOUNDS): every device part of a StepCost is a
max of a compute time and a memory time, all-reduce and all-to-all are communication, the
overhead is CPU. `BoundSplit` sums a step's seconds by those four terms; the bound is the
largest (under the overlap schedule: "cpu" when the CPU hides the device, else the largest
device term).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.cost.batch_shape import BatchShape

if TYPE_CHECKING:
    from shared.trace.step_record import StepRecord
    from sim.cost.extend_steps import ExtendSteps

STEP_COST_PARTS = ("linear", "attention", "lm_head", "allreduce", "experts", "alltoall", "overhead")
BOUNDS = ("compute", "memory", "communication", "cpu")


class StepCost(NamedTuple):
    """Seconds per part of one forward; `total` is their sum."""

    linear: float = 0.0      # decoder-layer projections and MLP
    attention: float = 0.0   # score/softmax/value over the KV cache
    lm_head: float = 0.0     # logits for the pruned rows
    allreduce: float = 0.0   # tensor-parallel all-reduces
    experts: float = 0.0     # routed experts of a mixture-of-experts model
    alltoall: float = 0.0    # expert-parallel dispatch and combine
    overhead: float = 0.0    # fixed per-step and per-layer costs (launches, scheduling)

    @property
    def total(self) -> float:
        return float(sum(self))

    @property
    def device(self) -> float:
        """The accelerator's part: everything but the (CPU-side) overhead."""
        return float(sum(self[:-1]))

    def time(self, overlap: bool = False) -> float:
        """The step's wall time: device + overhead, or under the overlap schedule (the CPU
        prepares the next step while the device computes) max(device, overhead).

        NOTE: the fixed per-step overhead stands in for the scheduler's CPU time until the
        cost model prices the CPU on its own."""
        return max(self.device, self.overhead) if overlap else self.total

    def parts(self) -> dict[str, float]:
        return dict(self._asdict())


class BoundSplit(NamedTuple):
    """Seconds of one step by what bounds them (BOUNDS): the device parts whose compute time
    exceeds their memory time, the other device parts, the collectives, the CPU overhead.
    Their sum is the step's `StepCost.total` (up to float rounding)."""

    compute: float = 0.0
    memory: float = 0.0
    communication: float = 0.0
    cpu: float = 0.0

    @property
    def device(self) -> float:
        return self.compute + self.memory + self.communication

    def bound(self, overlap: bool = False) -> str:
        """The largest of the four terms (ties: the first in BOUNDS). Under the overlap
        schedule the step is max(device, cpu): "cpu" when cpu >= device, else the largest
        device term."""
        # NOTE: comparisons in BOUNDS order (ties to the first): this runs once per step of
        # every simulated run (the steps' bound column).
        compute, memory, communication, cpu = self
        if overlap:
            if cpu >= compute + memory + communication:
                return "cpu"
            cpu = -1.0   # under overlap the CPU bounds only when it hides the device
        if compute >= memory and compute >= communication and compute >= cpu:
            return BOUNDS[0]
        if memory >= communication and memory >= cpu:
            return BOUNDS[1]
        return BOUNDS[2] if communication >= cpu else BOUNDS[3]


def bounds_of(compute: np.ndarray, memory: np.ndarray, communication: np.ndarray,
              cpu: np.ndarray, overlap: bool = False) -> list[str]:
    """[N] `BoundSplit(...).bound(overlap)` of N steps whose terms are [N] float64 arrays (the
    same comparisons, over arrays)."""
    hides = cpu >= compute + memory + communication if overlap else np.zeros(len(cpu), bool)
    if overlap:
        cpu = np.full(len(cpu), -1.0)
    first = np.select([(compute >= memory) & (compute >= communication) & (compute >= cpu),
                       (memory >= communication) & (memory >= cpu), communication >= cpu],
                      [0, 1, 2], 3)
    return np.array(BOUNDS)[np.where(hides, 3, first)].tolist()


def split_max(compute: float, memory: float, seconds: float | None = None) -> BoundSplit:
    """A part priced max(compute, memory) (+ fixed latency: `seconds`, default the max) as
    compute when compute > memory, else memory."""
    seconds = max(compute, memory) if seconds is None else seconds
    return BoundSplit(compute=seconds) if compute > memory else BoundSplit(memory=seconds)


def sum_splits(*splits: BoundSplit) -> BoundSplit:
    return BoundSplit(*map(sum, zip(*splits, strict=True))) if splits else BoundSplit()


class CostModel(ABC):
    """Contract: `step_cost(shape)` is a pure function of the shape (same shape, same cost),
    every part is finite and >= 0, and `step_time(shape, overlap) ==
    step_cost(shape).time(overlap)`. `step_split(shape)` is pure too, every term >= 0, and
    its terms sum to `step_cost(shape).total` (up to float rounding)."""

    @abstractmethod
    def step_cost(self, shape: BatchShape) -> StepCost: ...

    def describe(self) -> str:
        """One line naming the model and what it prices, for the trace header."""
        return type(self).__name__

    def step_time(self, shape: BatchShape, overlap: bool = False) -> float:
        return self.step_cost(shape).time(overlap)

    def step_split(self, shape: BatchShape) -> BoundSplit:
        """The step's seconds by bound. This default cannot tell compute from memory: the
        device parts count as compute, all-reduce and all-to-all as communication, the
        overhead as cpu. Models that know each part's compute and memory times override it."""
        c = self.step_cost(shape)
        return BoundSplit(c.linear + c.attention + c.lm_head + c.experts, 0.0,
                          c.allreduce + c.alltoall, c.overhead)

    def step_bound(self, shape: BatchShape, overlap: bool = False) -> str:
        """What bounds the step, one of BOUNDS (`BoundSplit.bound` of `step_split`)."""
        return self.step_split(shape).bound(overlap)

    def decode_step_bound(self, seq_lens: np.ndarray, padded_batch_size: int,
                          overlap: bool = False) -> str:
        """step_bound(BatchShape.decode(seq_lens, padded_batch_size), overlap) of a decode
        step ([B] int64 seq_lens, its token included). Models may override it with
        arithmetic on the totals that gives the same bound."""
        return self.step_bound(BatchShape.decode(seq_lens, padded_batch_size), overlap)

    def decode_step_bounds(self, seq_lens: Sequence[Sequence[int]], padded: Sequence[int],
                           overlap: bool = False) -> list[str]:
        """decode_step_bound of many decode steps (their seq_lens, their padded sizes, each
        >= its len). Models may override it with array arithmetic that names the same bounds."""
        return [self.decode_step_bound(np.asarray(s, dtype=np.int64), p, overlap)
                for s, p in zip(seq_lens, padded, strict=True)]

    def extend_step_bounds(self, steps: ExtendSteps, overlap: bool = False) -> list[str]:
        """step_bound of many extend steps. Models may override it with array arithmetic
        on the steps' totals (`ExtendSteps.totals`) that names the same bounds."""
        return [self.step_bound(shape, overlap) for shape in steps.shapes()]

    def decode_step_times(self, seq_lens: np.ndarray, padded_batch_size: int,
                          overlap: bool = False) -> Iterator[float]:
        """step_time of the decode steps of a batch whose seq_lens ([B], the step's token
        included) start at `seq_lens` and grow by one per step, lazily and without end.
        Models may override it with arithmetic that gives the identical floats."""
        for j in itertools.count():
            yield self.step_time(BatchShape.decode(seq_lens + j, padded_batch_size), overlap)


class ZeroCostModel(CostModel):
    """Every step costs nothing: the null model."""

    def step_cost(self, shape: BatchShape) -> StepCost:
        return StepCost()

    def describe(self) -> str:
        return "zero"


def reprice(model: CostModel, records: Iterable[StepRecord], overlap: bool = False) -> np.ndarray:
    """[N] float64 seconds `model` gives each recorded step (its recorded batch re-priced,
    under the overlap schedule when `overlap`)."""
    return np.array([model.step_time(BatchShape.from_step_record(r), overlap) for r in records],
                    dtype=np.float64)
