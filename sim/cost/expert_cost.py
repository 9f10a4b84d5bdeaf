"""`ExpertCost`: the seconds a mixture-of-experts model's routed experts and their
expert-parallel all-to-all add to one step, on the busiest GPU (the step waits for it).

With tp GPUs and expert parallelism ep (ep divides tp), each EP rank holds E / ep experts,
each split over tp / ep GPUs (SGLang's moe_tp). Per sparse layer, for a step of T token rows
and the busiest rank's load (`sim.cost.expert_routing`: P routed pairs, D distinct experts):

    experts  = max(P * 2 * 3 * hidden * expert_intermediate / moe_tp / compute rate,
                   D * 3 * hidden * expert_intermediate * weight bytes / moe_tp / memory rate)
    alltoall = P * (ep - 1) / ep * 2 * hidden * activation bytes / link rate

The all-to-all sends each remote pair's hidden vector out (dispatch) and its result back
(combine), as DeepEP does, over the hardware entry's interconnect (one direction).
NOTE: dispatch is priced at the activation dtype (bf16) even for fp8 models.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.cost.expert_routing import ExpertRouting


@dataclass(frozen=True)
class ExpertCost:
    routing: ExpertRouting
    sparse_layers: int
    seconds_per_pair: float        # expert GEMM FLOPs of one (token, expert) pair / rate
    seconds_per_expert: float      # one expert's weight bytes (this GPU's share) / rate
    alltoall_per_pair: float       # dispatch + combine bytes of one remote pair / rate
    _cache: dict[int, tuple[float, float]] = field(default_factory=dict, init=False,
                                                   repr=False, compare=False)

    def times(self, rows: int) -> tuple[float, float]:
        """(experts, alltoall) seconds of a step of `rows` token rows, all sparse layers.
        NOTE: memoised per row count; the value depends on `rows` only."""
        cached = self._cache.get(rows)
        if cached is None:
            load = self.routing.load(rows)
            experts = self.sparse_layers * max(load.pairs * self.seconds_per_pair,
                                               load.experts * self.seconds_per_expert)
            cached = (experts, self.sparse_layers * load.pairs * self.alltoall_per_pair)
            self._cache[rows] = cached
        return cached


def expert_cost(model, tp: int, ep: int, zipf: float, compute_rate: float,
                memory_rate: float, link_rate: float, activation_bytes: int) -> ExpertCost | None:
    """The ExpertCost of a `sim.model.shape.ModelShape` at (tp, ep); None for a dense model."""
    moe = model.moe
    if moe is None:
        return None
    moe_tp = tp // ep
    routing = ExpertRouting(moe.num_experts, moe.experts_per_token, ep, zipf)
    remote = (ep - 1) / ep * 2 * model.hidden_size * activation_bytes
    return ExpertCost(
        routing, model.num_sparse_layers,
        2 * model.params_per_expert / moe_tp / compute_rate,
        model.params_per_expert * model.module_bytes_per_param("experts") / moe_tp / memory_rate,
        remote / link_rate)
