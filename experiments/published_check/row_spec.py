"""`RowSpec`: one published measurement expressed as a simulator run, or `Unexpressed` with
the reason it cannot be (yet). Built from a calibration-set row by `experiments.
published_check.express`; run by `experiments.published_check.predict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WorkloadSpec:
    """The requests of a published run: fixed lengths (`input_len`, `output_len`), the
    ShareGPT-like mix (`sharegpt=True`) or lengths drawn from `input_dist` / `output_dist`
    (`shared.workload.length_dist` distributions, a named dataset's), `num_prompts` of them, Poisson
    at `rate` (inf: all queued at t=0) with at most `concurrency` in flight (None: no
    limit)."""

    num_prompts: int
    input_len: int = 0
    output_len: int = 0
    rate: float = float("inf")
    concurrency: int | None = None
    sharegpt: bool = False
    input_dist: Any = None
    output_dist: Any = None


@dataclass(frozen=True)
class RowSpec:
    """A calibration row as a run of `sim.run.simulate`: `sim_args` are its keywords (model,
    hardware, tp, ep_size, quantization, kv_cache_dtype and EngineConfig fields), `metric`
    the RunResult summary key it is compared on, times `scale` (1000: seconds to ms)."""

    row_id: str
    source: str
    published: float
    unit: str
    metric: str
    workload: WorkloadSpec
    sim_args: dict[str, Any] = field(default_factory=dict)
    scale: float = 1.0
    groups: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()

    def with_cost_model(self, cost_model: str, kernel_params: Any = None) -> RowSpec:
        """This run on `cost_model` ("kernel" or "roofline"), the kernel model with
        `kernel_params` (None: its defaults)."""
        extra = {} if kernel_params is None else {"kernel_params": kernel_params}
        return dataclasses.replace(self, sim_args={**self.sim_args, "cost_model": cost_model,
                                                   **extra})


@dataclass(frozen=True)
class Unexpressed:
    """A row the simulator cannot run as published, and why."""

    row_id: str
    source: str
    reason: str
