"""`NodeNetwork`: how a chip's GPUs reach GPUs in other nodes, for collectives and
expert-parallel all-to-alls that span nodes: GPUs per node (one NVLink domain) and each
GPU's own network card (the rail-optimised DGX/HGX layout, one NIC per GPU), with the
fraction of the card's bandwidth the all-to-all kernels measure. Each chip's `Hardware`
entry holds its network (`Hardware.network`); a hardware JSON entry that gives none and has
no base gets `DEFAULT_NETWORK`.

Sources: NVIDIA DGX A100/H100/H200/B200 user guides (8 GPUs per node, one ConnectX-6
200 Gb/s (A100) or ConnectX-7 400 Gb/s (H100, H200, B200) compute-fabric NIC per GPU); AMD
MI300X platforms ship 8 GPUs with one 400 Gb/s NIC each (AMD Instinct MI300X platform
reference design); Ascend Atlas 800T A2: 8 NPUs, 8 x 200 GE RoCE. DeepEP on H800 with a
CX7 400 Gb/s card (~50 GB/s): normal kernels 43-47 GB/s RDMA at EP 16-64 (0.9 of the
card), low-latency kernels 39-46 GB/s (0.82) (deepseek-ai/DeepEP README, Performance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NORMAL_A2A_FRACTION = 0.9        # DeepEP normal kernels: 43-47 GB/s of ~50 GB/s
LOW_LATENCY_A2A_FRACTION = 0.82  # DeepEP low-latency kernels: 39-46 GB/s of ~50 GB/s
NETWORK_FIELDS = ("gpus_per_node", "nic_bw", "source")


@dataclass(frozen=True)
class NodeNetwork:
    gpus_per_node: int
    nic_bw: float                # bytes/s, one direction, per GPU
    source: str

    def __post_init__(self) -> None:
        n, bw = self.gpus_per_node, self.nic_bw
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"network.gpus_per_node must be an integer >= 1, got {n!r}")
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) \
                or not math.isfinite(bw) or bw <= 0:
            raise ValueError(f"network.nic_bw must be a positive number, got {bw!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"network.source must name where the numbers come from, got "
                             f"{self.source!r}")

    def to_dict(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in NETWORK_FIELDS}


DEFAULT_NETWORK = NodeNetwork(8, 25e9, "assumption for hardware without a network entry: "
                                       "8 GPUs per node, one 200 Gb/s NIC per GPU")


def distinct_remote_nodes(experts_per_token: int, nodes: int) -> float:
    """Expected number of other nodes a token's experts sit on, experts spread evenly over
    `nodes` nodes and chosen uniformly: (nodes - 1) (1 - (1 - 1 / nodes) ^ k)."""
    if nodes <= 1:
        return 0.0
    return (nodes - 1) * (1 - (1 - 1 / nodes) ** experts_per_token)


def deepep_time(tokens: float, experts_per_token: int, hidden: int, ep_size: int,
                net: NodeNetwork, nvlink_bus: float, low_latency: bool) -> float:
    """Seconds of one DeepEP dispatch (fp8, 1 byte per value) plus combine (bf16, 2 bytes)
    of `tokens` rows on one rank. Low-latency kernels (decode) send every (token, expert)
    pair's row over RDMA; normal kernels (extends) send a row once per remote node over
    RDMA and forward it over NVLink inside the node, the slower of the two bounding."""
    if ep_size <= 1 or tokens <= 0:
        return 0.0
    per_row = 3 * hidden   # dispatch fp8 + combine bf16
    if low_latency:
        remote = tokens * experts_per_token * (ep_size - 1) / ep_size * per_row
        return remote / (net.nic_bw * LOW_LATENCY_A2A_FRACTION)
    nodes = -(-ep_size // net.gpus_per_node)
    rdma = tokens * distinct_remote_nodes(experts_per_token, nodes) * per_row
    local = min(ep_size, net.gpus_per_node)
    nvlink = tokens * experts_per_token * (local - 1) / ep_size * per_row
    return max(rdma / (net.nic_bw * NORMAL_A2A_FRACTION), nvlink / nvlink_bus)
