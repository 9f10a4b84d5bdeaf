"""Runs a plan's points as tasks on a Ray cluster (`batchtwin plan --backend ray`): a local
one started for the plan (`jobs` CPUs) unless `address` names a running cluster, whose
workers need batchtwin installed. Each point is one task running `run_point`; results come
back in the order of the points, the same PointResults the process pool gives (a run is a
pure function of its point and seed).

Ray is an optional extra: `pip install -e ".[ray]"`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm

from experiments.plan.point import PlanSpec, Point, PointResult, run_point
from experiments.plan.pool import grow_bar

INSTALL_HINT = 'the Ray backend needs Ray: pip install -e ".[ray]" (or pip install ray)'


class RayPool:
    """`with RayPool(spec, jobs, address) as pool: pool.run(points, bar)`."""

    def __init__(self, spec: PlanSpec, jobs: int, address: str | None = None) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {jobs}")
        self.spec, self.jobs, self.address = spec, jobs, address
        self._ray: Any = None
        self._started = False

    def __enter__(self) -> RayPool:
        try:
            import ray
        except ImportError:
            raise ValueError(INSTALL_HINT) from None
        self._ray = ray
        if not ray.is_initialized():
            kwargs = {"address": self.address} if self.address else {"num_cpus": self.jobs}
            ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
            self._started = True
        self._task = ray.remote(num_cpus=1)(run_point)
        self._spec = ray.put(self.spec)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def run(self, points: Sequence[Point], bar: tqdm) -> list[PointResult]:
        """Results in the order of `points`; `bar` grows by len(points) and ticks per run."""
        ray = self._ray
        grow_bar(bar, len(points))
        refs = [self._task.remote(self._spec, p) for p in points]
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            bar.update(len(ready))
        return list(ray.get(refs))

    def stream(self, points: Sequence[Point], follow: Callable[[PointResult], Sequence[Point]],
               bar: tqdm) -> None:
        """As `PointPool.stream`: each result's follow-up points start as it comes back."""
        ray = self._ray
        pending = [self._task.remote(self._spec, p) for p in points]
        grow_bar(bar, len(pending))
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            bar.update(1)
            more = follow(ray.get(ready[0]))
            grow_bar(bar, len(more))
            pending += [self._task.remote(self._spec, p) for p in more]
