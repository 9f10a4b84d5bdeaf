"""Collectives as latency plus bandwidth (alpha-beta), per algorithm and protocol, in the
form and with the constants of NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc:
`baseLat`, `hwLat` and the protocol bandwidth factors), which NCCL uses to choose its
algorithm and protocol by message size. We choose the same way: the fastest candidate.

All-reduce over n ranks in one NVLink domain:

    ring: latency = base + 2 (n - 1) hop,   algorithm bandwidth = bus * n / (2 (n - 1))
    tree: latency = base + 2 (n - 1) hop,   algorithm bandwidth = min(0.9 bus, cap) / 2

for the protocols LL (small messages: low latency, a quarter of the bandwidth on a ring),
LL128 (x 0.92) and Simple (full bandwidth, more latency). `bus` is the per-GPU link
bandwidth in one direction times its achieved fraction (the hardware entry's).
All-gather (the vocabulary-parallel logits) is a ring of n - 1 steps moving (n - 1) / n.
"""

from __future__ import annotations

from dataclasses import dataclass

# NVLink, microseconds: base latency and per-hop latency, (LL, LL128, Simple).
RING_BASE_US = (3.6, 10.0, 8.4)
RING_HOP_US = (0.47, 1.9, 3.4)
TREE_BASE_US = (4.4, 4.4, 0.0)
TREE_HOP_US = (0.52, 1.2, 28.0)
RING_BW_FACTOR = (1 / 4, 0.92, 1.0)            # all-reduce; LL halves the payload
GATHER_BW_FACTOR = (1 / 3, 0.92, 1.0)          # all-gather (NCCL: LL at 1/3 outside all-reduce)
TREE_BW_FACTOR = (1 / 3.8, 7 / 9, 1.0)
TREE_BW_CAP = 110e9                             # bytes/s, one node
SOURCE = "NVIDIA/nccl src/graph/tuning.cc (baseLat, hwLat, protocol bandwidth factors)"


@dataclass(frozen=True)
class Collective:
    """The time of one collective: its latency and bandwidth terms (seconds)."""

    latency: float
    transfer: float

    @property
    def total(self) -> float:
        return self.latency + self.transfer


def allreduce_candidates(ranks: int, bus_bw: float) -> tuple[tuple[float, float], ...]:
    """(latency seconds, algorithm bandwidth bytes/s) of each ring and tree protocol of an
    all-reduce over `ranks` >= 2 GPUs: a message of b bytes takes latency + b / bandwidth."""
    steps = 2 * (ranks - 1)
    ring = tuple(((RING_BASE_US[p] + steps * RING_HOP_US[p]) * 1e-6,
                  bus_bw * RING_BW_FACTOR[p] * ranks / steps) for p in range(3))
    tree_bw = min(0.9 * bus_bw, TREE_BW_CAP) / 2
    return ring + tuple(((TREE_BASE_US[p] + steps * TREE_HOP_US[p]) * 1e-6,
                         tree_bw * TREE_BW_FACTOR[p]) for p in range(3))


def allreduce_time(nbytes: float, ranks: int, bus_bw: float) -> Collective:
    """The fastest ring or tree all-reduce of `nbytes` over `ranks` GPUs."""
    if ranks <= 1 or nbytes <= 0:
        return Collective(0.0, 0.0)
    return min((Collective(latency, nbytes / bw)
                for latency, bw in allreduce_candidates(ranks, bus_bw)), key=lambda c: c.total)


def allgather_time(nbytes: float, ranks: int, bus_bw: float) -> Collective:
    """A ring all-gather whose result is `nbytes` (each rank contributes nbytes / ranks)."""
    if ranks <= 1 or nbytes <= 0:
        return Collective(0.0, 0.0)
    steps = ranks - 1
    return min((Collective((RING_BASE_US[p] + steps * RING_HOP_US[p]) * 1e-6,
                           nbytes * steps / ranks / (bus_bw * GATHER_BW_FACTOR[p])) for p in range(3)),
               key=lambda c: c.total)


def alltoall_time(nbytes_out: float, ranks: int, bus_bw: float) -> Collective:
    """An all-to-all in which each rank sends `nbytes_out` in all to the other ranks, as
    ranks - 1 point-to-point steps (the LL protocol's latency, the full link bandwidth)."""
    if ranks <= 1 or nbytes_out <= 0:
        return Collective(0.0, 0.0)
    return Collective((RING_BASE_US[0] + (ranks - 1) * RING_HOP_US[0]) * 1e-6, nbytes_out / bus_bw)


def scatter_gather_time(scatter_bytes: float, gather_bytes: float, ranks: int,
                        bus_bw: float) -> float:
    """Seconds of a reduce-scatter whose unreduced input is `scatter_bytes` and an all-gather
    whose result is `gather_bytes` (the two halves of an all-reduce, each in its own dtype).
    NOTE: a ring reduce-scatter moves the bytes of the all-gather of the same size, so it is
    priced as one."""
    return (allgather_time(scatter_bytes, ranks, bus_bw).total
            + allgather_time(gather_bytes, ranks, bus_bw).total)
