"""`KVLink`: how a prefill instance's KV reaches a decode instance under prefill/decode
disaggregation: latency plus bytes over bandwidth, one request's transfer after another.

Each prefill TP rank sends its own shard of a request's KV (`sim.model.parallelism`: whole KV
heads, MLA's latent on every rank) over its own network card to the matching decode rank,
all ranks at once, so a transfer takes latency + prompt tokens x KV bytes per token per
rank / the card's bandwidth. `kv_link(...)` reads the card from the hardware entry's node
network (`Hardware.network`: 400 Gb/s ConnectX-7 per H100/H200/B200) and takes NCCL's
tuning-model latency of one network hop of a bulk transfer, 9.6 us (NVIDIA/nccl
src/graph/tuning.cc, hwLat[NET][Ring][Simple]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.hardware.cluster_network import NodeNetwork

NET_HOP_LATENCY = 9.6e-6   # s: NCCL tuning.cc hwLat[NET][Ring][Simple]


@dataclass(frozen=True)
class KVLink:
    latency: float          # seconds per transfer
    bandwidth: float        # bytes/s per rank (math.inf: free)
    bytes_per_token: float  # KV bytes one token takes on one rank

    def __post_init__(self) -> None:
        if not (self.latency >= 0 and math.isfinite(self.latency)):
            raise ValueError(f"KV link latency must be finite and >= 0 s, got {self.latency!r}")
        if not self.bandwidth > 0:
            raise ValueError(f"KV link bandwidth must be > 0 bytes/s, got {self.bandwidth!r}")

    def transfer_time(self, tokens: int) -> float:
        """Seconds to move `tokens` tokens' KV."""
        return self.latency + tokens * self.bytes_per_token / self.bandwidth


def kv_link(network: NodeNetwork, bytes_per_token: float, latency: float | None = None,
            bandwidth: float | None = None) -> KVLink:
    """The link of a hardware entry's network card (`Hardware.network`); `latency` /
    `bandwidth` override it (0 and math.inf: a free link)."""
    nic = network.nic_bw
    return KVLink(NET_HOP_LATENCY if latency is None else latency,
                  nic if bandwidth is None else bandwidth, bytes_per_token)
