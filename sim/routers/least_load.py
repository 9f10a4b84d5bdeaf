"""`least_load`: the replica with the fewest running plus queued tokens now, as a router
polling every engine's load would choose; ties (an idle fleet) go round in turn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.routers.base import least_loaded

if TYPE_CHECKING:
    from shared.workload.workload import WorkloadRequest
    from sim.routers.base import FleetView


class LeastLoad:
    name, reads_load = "least_load", True

    def __init__(self, num_replicas: int, seed: int = 0) -> None:
        self._turn = 0

    def route(self, request: WorkloadRequest, fleet: FleetView) -> int:
        self._turn += 1
        return least_loaded(fleet, range(fleet.num_replicas), start=self._turn - 1)
