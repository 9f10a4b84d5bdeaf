"""The roofline's two latency terms, each the kernel model's own (one source of truth):

- kernel latency: each kernel the kernel model launches for a forward's linear layers and
  attention takes `KernelParams.kernel_latency` beyond its work (KERNEL_LATENCY_SOURCE): the
  GEMMs of the shared linear layers (`sim.model.layer_gemms`) and every layer's elementwise kernels
  (norms, rotary, activation; ELEMENTWISE_SOURCE) add theirs to linear, each layer's
  attention kernel its own to attention (`KernelLatency`);
- all-reduce latency: each all-reduce is NCCL's alpha-beta model, the fastest ring or tree
  protocol for its size (`sim.hardware.collectives`, ALLREDUCE_SOURCE). A large message keeps the
  latency-free ring's bandwidth term (NCCL's Simple ring moves 2 (n - 1) / n of it per link);
  a small one pays NCCL's latency, microseconds where its bytes take nanoseconds.

NOTE: the routed experts' kernels (six per sparse layer in the kernel model), the LM head's
GEMM and its logits all-gather carry no latency here; the kernel model's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.cost.kernel.params import SOURCES, KernelParams
from sim.hardware.collectives import SOURCE as ALLREDUCE_SOURCE
from sim.hardware.collectives import allreduce_candidates, allreduce_time
from sim.model.layer_gemms import forward_gemms
from sim.model.shape import ModelShape

KERNEL_LATENCY_SOURCE = f"KernelParams.kernel_latency: {SOURCES['kernel_latency']}"
ELEMENTWISE_SOURCE = f"KernelParams.elementwise_kernels: {SOURCES['elementwise_kernels']}"
__all__ = ["ALLREDUCE_SOURCE", "ELEMENTWISE_SOURCE", "KERNEL_LATENCY_SOURCE", "AllReduces",
           "KernelLatency", "kernel_latency"]


class KernelLatency(NamedTuple):
    """Seconds of kernel latency one forward adds to a part, on one rank."""

    linear: float         # decode steps (MLA: its absorbed products)
    naive_linear: float   # extend steps (MLA: its kv_b)
    attention: float


def kernel_latency(model: ModelShape, tp: int, params: KernelParams | None = None
                   ) -> KernelLatency:
    """The kernel latency of a forward on one of `tp` ranks: linear's GEMMs (every layer's
    attention projections and MLP, a sparse layer's router and shared experts, MLA's absorbed
    products in decode or its kv_b in an extend) and elementwise kernels, attention's one
    kernel per layer; `params` None: KernelParams() (the kernel model's defaults)."""
    p, g = params or KernelParams(), forward_gemms(model, tp)
    gemms = sum(x.count for x in (*g.attention, *g.rows))
    elementwise = model.num_layers * p.elementwise_kernels
    decode = gemms + sum(x.count for x in g.decode_rows) + elementwise
    extend = gemms + sum(x.count for x in g.extend_kv) + elementwise
    return KernelLatency(decode * p.kernel_latency, extend * p.kernel_latency,
                         model.num_layers * p.kernel_latency)


@dataclass(frozen=True)
class AllReduces:
    """`count` all-reduces per step of a [rows, hidden] activation (`row_bytes` per row) over
    `ranks` GPUs of `bus_bw` bytes/s each, NCCL's fastest (`sim.hardware.collectives.allreduce_time`):
    of one step (`seconds`, memoised by rows) or of many (`seconds_over`: the same floats)."""

    count: int
    row_bytes: int
    ranks: int
    bus_bw: float
    _memo: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def seconds(self, rows: int) -> float:
        seconds = self._memo.get(rows)
        if seconds is None:
            seconds = self.count * allreduce_time(rows * self.row_bytes, self.ranks,
                                                  self.bus_bw).total
            self._memo[rows] = seconds
        return seconds

    def seconds_over(self, rows: np.ndarray) -> np.ndarray:
        """[N] seconds of N steps of `rows` ([N] int64) rows."""
        if self.ranks <= 1:
            return np.zeros(len(rows))
        latency, bandwidth = np.array(allreduce_candidates(self.ranks, self.bus_bw)).T  # [C], [C]
        # NOTE: allreduce_time's operations (latency + bytes / bandwidth, the fastest), over arrays.
        fastest = np.min(latency[:, None] + (rows * self.row_bytes)[None, :] / bandwidth[:, None],
                         axis=0)                                                     # [N]
        return self.count * np.where(rows > 0, fastest, 0.0)
