"""`power_of_two`: two distinct replicas drawn from a seeded generator, the one with fewer
running plus queued tokens taken (the first drawn on ties). NOTE: the SGLang router polls
the loads every few seconds; here the draw sees them at the arrival."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.routers.base import least_loaded

if TYPE_CHECKING:
    from shared.workload.workload import WorkloadRequest
    from sim.routers.base import FleetView


class PowerOfTwo:
    name, reads_load = "power_of_two", True

    def __init__(self, num_replicas: int, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def route(self, request: WorkloadRequest, fleet: FleetView) -> int:
        if fleet.num_replicas == 1:
            return 0
        pair = [int(i) for i in self._rng.choice(fleet.num_replicas, 2, replace=False)]
        return least_loaded(fleet, pair)
