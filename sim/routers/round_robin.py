"""`round_robin`: replicas in turn, whatever their load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.workload.workload import WorkloadRequest
    from sim.routers.base import FleetView


class RoundRobin:
    name, reads_load = "round_robin", False

    def __init__(self, num_replicas: int, seed: int = 0) -> None:
        self._next = 0

    def route(self, request: WorkloadRequest, fleet: FleetView) -> int:
        i, self._next = self._next, (self._next + 1) % fleet.num_replicas
        return i
