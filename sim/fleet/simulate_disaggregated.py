"""`simulate_disaggregated(workload, prefill=x, decode=y)`: serve a workload with prefill/
decode disaggregation (`sim.fleet.disaggregation`, SGLang's `--disaggregation-mode`), x prefill
and y decode instances, each built as `simulate` builds its engine
(`sim.run.simulate.build_simulation`) with its own tensor parallelism.

Decode instances run as SGLang's decode servers do: received requests join the running
batch in the same step (`enable_mixed_chunk`), no prefix cache, no chunking of a received
prompt; their extends are priced as decodes (`sim.fleet.transferred_kv_cost`). The KV link of
each prefill instance comes from its hardware's network card (`sim.fleet.kv_link`); `kv_link_latency`
and `kv_link_bandwidth` (bytes/s per rank) override it (0 and math.inf: a free link).
"""

from __future__ import annotations

import re
from typing import Any

from shared.trace.run_result import SLO
from shared.workload.workload import Workload
from sim.fleet.disagg_result import DisaggResult
from sim.fleet.disaggregation import drive_disaggregated
from sim.fleet.driver import Replica
from sim.fleet.kv_link import kv_link
from sim.fleet.transferred_kv_cost import TransferredKVCost
from sim.model.parallelism import kv_bytes_per_token_per_rank
from sim.routers import make_router
from sim.routers.base import Router
from sim.run.sim_model_runner import SimModelRunner
from sim.run.simulate import build_simulation

DECODE_ENGINE = {"enable_mixed_chunk": True, "disable_radix_cache": True,
                 "chunked_prefill_size": None}


def parse_layout(text: str) -> tuple[int, int]:
    """"2P4D" -> (2, 4); ValueError naming the expected form otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*[Pp]\s*(\d+)\s*[Dd]\s*", str(text))
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise ValueError(f"disaggregation layout must be xPyD with x, y >= 1 (e.g. 1P2D), "
                         f"got {text!r}")
    return int(m[1]), int(m[2])


def simulate_disaggregated(workload: Workload, *, prefill: int = 1, decode: int = 1,
                           tp: int = 1, prefill_tp: int | None = None,
                           decode_tp: int | None = None, prefill_ep: int | None = None,
                           decode_ep: int | None = None,
                           kv_link_latency: float | None = None,
                           kv_link_bandwidth: float | None = None,
                           prefill_router: str | Router | None = None,
                           decode_router: str | Router | None = None, seed: int = 0,
                           slo: SLO | None = None, progress: bool = False,
                           **simulation_args: Any) -> DisaggResult:
    """`prefill_tp` / `decode_tp` default to `tp`, `prefill_ep` / `decode_ep` to the
    `ep_size` of `simulation_args` (`simulate`'s keywords: model, hardware, engine flags...,
    given to every instance)."""
    for name, n in (("prefill", prefill), ("decode", decode)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} instances must be an integer >= 1, got {n!r}")
    pre_args = _with_ep(simulation_args, prefill_ep)
    pre = [build_simulation(seed=seed, tp=prefill_tp or tp, **pre_args) for _ in range(prefill)]
    dec = [_decode_instance(seed, decode_tp or tp, _with_ep(simulation_args, decode_ep))
           for _ in range(decode)]
    bytes_per_token = kv_bytes_per_token_per_rank(pre[0].model_shape, prefill_tp or tp)
    link = kv_link(pre[0].hardware.network, bytes_per_token, kv_link_latency, kv_link_bandwidth)
    run = drive_disaggregated([Replica(s.scheduler, s.runner, s.token_source.finished)
                               for s in pre], dec, workload, [link] * prefill,
                              make_router(prefill_router, prefill, seed),
                              make_router(decode_router, decode, seed), progress=progress)
    return DisaggResult.from_run(run, slo)


def _with_ep(simulation_args: dict[str, Any], ep: int | None) -> dict[str, Any]:
    return simulation_args if ep is None else {**simulation_args, "ep_size": ep}


def _decode_instance(seed: int, tp: int, simulation_args: dict[str, Any]) -> Replica:
    s = build_simulation(seed=seed, tp=tp, **{**simulation_args, **DECODE_ENGINE})
    runner = SimModelRunner(TransferredKVCost(s.cost_model), s.token_source, s.scheduler.config,
                            s.scheduler.model_info)
    return Replica(s.scheduler, runner, s.token_source.finished)
