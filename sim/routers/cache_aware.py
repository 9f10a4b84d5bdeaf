"""`cache_aware`: the SGLang router's default policy, over an approximate prefix tree per
replica of the prompts it was sent (`sim.routers.prefix_blocks`).

When the fleet is imbalanced, (max - min) requests > `balance_abs_threshold` and max >
min x `balance_rel_threshold`, the request goes to the least loaded replica (running plus
queued requests). Otherwise to the replica whose tree matches the longest prefix of the
prompt, when the match covers more than `cache_threshold` of it; else to the replica with
the smallest tree (the most room in its cache). Either way the prompt joins the chosen
replica's tree. Defaults: the SGLang model gateway's (cache_threshold 0.3,
balance_abs_threshold 64, balance_rel_threshold 1.5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.routers.base import least_loaded
from sim.routers.prefix_blocks import DEFAULT_BLOCK_SIZE, PrefixBlocks, block_chain

if TYPE_CHECKING:
    from shared.workload.workload import WorkloadRequest
    from sim.routers.base import FleetView


class CacheAware:
    name, reads_load = "cache_aware", True

    def __init__(self, num_replicas: int, seed: int = 0, cache_threshold: float = 0.3,
                 balance_abs_threshold: int = 64, balance_rel_threshold: float = 1.5,
                 block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs, self.balance_rel = balance_abs_threshold, balance_rel_threshold
        self.block_size = block_size
        self.trees = [PrefixBlocks(block_size) for _ in range(num_replicas)]

    def route(self, request: WorkloadRequest, fleet: FleetView) -> int:
        chain = block_chain(request.input_ids, self.block_size)
        replicas = range(fleet.num_replicas)
        if self._imbalanced(fleet):
            i = least_loaded(fleet, replicas, "requests")
        else:
            i = self._by_prefix(chain, len(request.input_ids), replicas)
        self.trees[i].insert(chain)
        return i

    def _imbalanced(self, fleet: FleetView) -> bool:
        loads = [fleet.load(i).requests for i in range(fleet.num_replicas)]
        low, high = min(loads), max(loads)
        return high - low > self.balance_abs and high > low * self.balance_rel

    def _by_prefix(self, chain: list[int], prompt_len: int, replicas: range) -> int:
        matched = [self.trees[i].matched_tokens(chain) for i in replicas]
        best = max(replicas, key=lambda i: matched[i])
        if matched[best] / prompt_len > self.cache_threshold:
            return best
        return min(replicas, key=lambda i: self.trees[i].size_tokens)
