"""Runs a plan's points on every local core (a process pool), or serially with `jobs=1`;
`make_pool` picks this or the Ray backend (`experiments.plan.ray_pool`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, as_completed, wait

from tqdm import tqdm

from experiments.plan.point import PlanSpec, Point, PointResult, run_point


class PointPool:
    """`with PointPool(spec, jobs) as pool: pool.run(points, bar)`; the worker processes live
    for the whole `with` block, so later rounds pay no start-up."""

    def __init__(self, spec: PlanSpec, jobs: int) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {jobs}")
        self.spec, self.jobs = spec, jobs
        self.executor: Executor | None = None

    def __enter__(self) -> PointPool:
        if self.jobs > 1:
            self.executor = ProcessPoolExecutor(max_workers=self.jobs)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)
            self.executor = None

    def run(self, points: Sequence[Point], bar: tqdm) -> list[PointResult]:
        """Results in the order of `points`; `bar` grows by len(points) and ticks per run."""
        grow_bar(bar, len(points))
        if self.executor is None:
            return [self._tick(bar, run_point(self.spec, p)) for p in points]
        futures = {self.executor.submit(run_point, self.spec, p): i for i, p in enumerate(points)}
        results: list[PointResult | None] = [None] * len(points)
        for f in as_completed(futures):
            results[futures[f]] = self._tick(bar, f.result())
        return [r for r in results if r is not None]

    def stream(self, points: Sequence[Point], follow: Callable[[PointResult], Sequence[Point]],
               bar: tqdm) -> None:
        """Run `points` and, as soon as each result is back, the points `follow(result)`
        gives, until none is left (an exception from `follow` cancels the rest)."""
        if self.executor is None:
            todo = deque(points)
            grow_bar(bar, len(todo))
            while todo:
                more = follow(self._tick(bar, run_point(self.spec, todo.popleft())))
                grow_bar(bar, len(more))
                todo.extend(more)
            return
        executor, pending = self.executor, set()
        for p in points:
            pending.add(executor.submit(run_point, self.spec, p))
        grow_bar(bar, len(pending))
        while pending:
            ready, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in ready:
                more = follow(self._tick(bar, f.result()))
                grow_bar(bar, len(more))
                pending |= {executor.submit(run_point, self.spec, p) for p in more}

    @staticmethod
    def _tick(bar: tqdm, result: PointResult) -> PointResult:
        bar.update(1)
        return result


def grow_bar(bar: tqdm, n: int) -> None:
    """The bar's total grows by `n` runs."""
    bar.total = (bar.total or 0) + n
    bar.refresh()

