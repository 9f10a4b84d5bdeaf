"""The fleet's routing policies by name (`sim.routers.base` has the contract). A new policy is a
new file here plus one entry in ROUTERS."""

from __future__ import annotations

from types import MappingProxyType

from sim.routers.base import Router
from sim.routers.cache_aware import CacheAware
from sim.routers.least_load import LeastLoad
from sim.routers.power_of_two import PowerOfTwo
from sim.routers.random_choice import RandomChoice
from sim.routers.round_robin import RoundRobin

ROUTERS = MappingProxyType({r.name: r for r in (
    RoundRobin, RandomChoice, LeastLoad, PowerOfTwo, CacheAware)})
DEFAULT_ROUTER = "round_robin"   # SGLang's --load-balance-method default for --dp-size


def make_router(router: str | Router | None, num_replicas: int, seed: int = 0) -> Router:
    """A router by name (None: DEFAULT_ROUTER), seeded; a Router object as given.
    ValueError naming the known policies for an unknown name."""
    if router is None:
        router = DEFAULT_ROUTER
    if not isinstance(router, str):
        return router
    if router not in ROUTERS:
        raise ValueError(f"unknown router {router!r} (known: {', '.join(ROUTERS)})")
    return ROUTERS[router](num_replicas, seed)
