"""`random`: a replica drawn uniformly from a generator seeded at construction."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shared.workload.workload import WorkloadRequest
    from sim.routers.base import FleetView


class RandomChoice:
    name, reads_load = "random", False

    def __init__(self, num_replicas: int, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def route(self, request: WorkloadRequest, fleet: FleetView) -> int:
        return int(self._rng.integers(fleet.num_replicas))
