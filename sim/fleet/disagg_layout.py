"""`Disaggregated(prefill=x, decode=y)`: a layout with prefill/decode disaggregation
(`sim.fleet.disaggregation`, SGLang's `--disaggregation-mode`), x prefill and y decode
instances, each built from the Deployment (`sim.run.build.build_simulation`) with its own
tensor parallelism, for `simulate(workload, deployment, Disaggregated(1, 2))`.

Decode instances run as SGLang's decode servers do: received requests join the running
batch in the same step (`enable_mixed_chunk`), no prefix cache, no chunking of a received
prompt; their extends are priced as decodes (`sim.fleet.transferred_kv_cost`). The KV link of
each prefill instance comes from its hardware's network card (`sim.fleet.kv_link`); `kv_link_latency`
and `kv_link_bandwidth` (bytes/s per rank) override it (0 and math.inf: a free link).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.trace.run_log import FULL_TRACE, Keep
from shared.trace.run_result import SLO, RunResult
from shared.workload.workload import Workload
from sim.fleet.disagg_result import disagg_result
from sim.fleet.disaggregation import drive_disaggregated
from sim.fleet.driver import Replica
from sim.fleet.kv_link import kv_link
from sim.fleet.transferred_kv_cost import TransferredKVCost
from sim.model.parallelism import kv_bytes_per_token_per_rank
from sim.routers import make_router
from sim.routers.base import Router
from sim.run.build import build_simulation
from sim.run.deployment import Deployment
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import TokenSource

DECODE_ENGINE = {"enable_mixed_chunk": True, "disable_radix_cache": True,
                 "chunked_prefill_size": None}


def parse_layout(text: str) -> tuple[int, int]:
    """"2P4D" -> (2, 4); ValueError naming the expected form otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*[Pp]\s*(\d+)\s*[Dd]\s*", str(text))
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise ValueError(f"disaggregation layout must be xPyD with x, y >= 1 (e.g. 1P2D), "
                         f"got {text!r}")
    return int(m[1]), int(m[2])


@dataclass(frozen=True)
class Disaggregated:
    """`prefill_tp` / `decode_tp` default to the deployment's tp, `prefill_ep` / `decode_ep`
    to its ep_size; the routers to round_robin (a `sim.routers.ROUTERS` name or a Router)."""

    prefill: int = 1
    decode: int = 1
    prefill_tp: int | None = None
    decode_tp: int | None = None
    prefill_ep: int | None = None
    decode_ep: int | None = None
    kv_link_latency: float | None = None
    kv_link_bandwidth: float | None = None
    prefill_router: str | Router | None = None
    decode_router: str | Router | None = None

    def __post_init__(self) -> None:
        for name, n in (("prefill", self.prefill), ("decode", self.decode)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} instances must be an integer >= 1, got {n!r}")

    def run(self, workload: Workload, deployment: Deployment, *, seed: int = 0,
            slo: SLO | None = None, progress: bool = False, bounds: bool = True,
            token_source: TokenSource | None = None, keep: Keep = FULL_TRACE) -> RunResult:
        """Serve `workload`; `bounds` is not used (the disaggregated result has no bound
        column), nor is `keep` yet: every engine's trace is kept (the handoffs read them)."""
        d, tp = deployment, self.prefill_tp or deployment.tp
        pre_d = _instance(d, tp, self.prefill_ep)
        pre = [build_simulation(pre_d, seed=seed, token_source=token_source)
               for _ in range(self.prefill)]
        dec_d = _instance(d, self.decode_tp or d.tp, self.decode_ep, DECODE_ENGINE)
        dec = [_decode_instance(dec_d, seed, token_source) for _ in range(self.decode)]
        bytes_per_token = kv_bytes_per_token_per_rank(pre[0].model_shape, tp)
        link = kv_link(pre[0].hardware.network, bytes_per_token, self.kv_link_latency,
                       self.kv_link_bandwidth)
        run = drive_disaggregated([Replica(s.scheduler, s.runner, s.token_source.finished)
                                   for s in pre], dec, workload, [link] * self.prefill,
                                  make_router(self.prefill_router, self.prefill, seed),
                                  make_router(self.decode_router, self.decode, seed),
                                  progress=progress)
        return disagg_result(run, slo)


def _instance(d: Deployment, tp: int, ep: int | None, engine: dict | None = None) -> Deployment:
    """`d` with its own tp, ep (None: the deployment's) and engine fields over its own."""
    return d.replace(tp=tp, ep_size=d.ep_size if ep is None else ep, engine_changes=engine)


def _decode_instance(d: Deployment, seed: int, token_source: TokenSource | None) -> Replica:
    s = build_simulation(d, seed=seed, token_source=token_source)
    runner = SimModelRunner(TransferredKVCost(s.cost_model), s.token_source, s.scheduler.config,
                            s.scheduler.model_info)
    return Replica(s.scheduler, runner, s.token_source.finished)
