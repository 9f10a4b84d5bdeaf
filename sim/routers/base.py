"""`Router`: the policy that sends each arriving request to one replica of a fleet, and
`FleetView`, what it may look at when it decides.

Contract: the fleet calls `route(request, fleet)` once per request, in arrival order, at the
request's arrival time, and sends the request to the replica index it returns (0 <=
index < fleet.num_replicas). A router may keep state of its own (a cursor, prefix trees of
what it sent where, a generator seeded at construction) and may read the replicas' loads
through the view (`reads_load` says whether it does); it reads no clock and no global state,
so the same seed gives the same decisions. The names are the SGLang router's and llm-d's:
`sim.routers.ROUTERS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shared.loop.scheduler_load import SchedulerLoad
    from shared.workload.workload import WorkloadRequest


class FleetView(Protocol):
    @property
    def num_replicas(self) -> int: ...

    def load(self, replica: int) -> SchedulerLoad:
        """The replica's requests and tokens, running and queued, at this instant."""
        ...


class Router(Protocol):
    name: str
    reads_load: bool   # True: route() calls fleet.load()

    def route(self, request: WorkloadRequest, fleet: FleetView) -> int: ...


def least_loaded(fleet: FleetView, replicas: range | list[int], key: str = "tokens",
                 start: int = 0) -> int:
    """The replica of `replicas` with the smallest load `key` ("tokens" or "requests"); on
    ties the first from position `start` on (a caller rotating `start` spreads ties)."""
    order = list(replicas)
    order = order[start % len(order):] + order[:start % len(order)]
    return min(order, key=lambda i: getattr(fleet.load(i), key))
