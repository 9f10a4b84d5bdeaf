"""`busiest_rank_rows(extend_lens, ranks)`: how many token rows the busiest attention
data-parallel rank computes in a step.

Under attention DP each rank runs attention (and, with dense DP, the dense layers) on its
own requests; a request's tokens never split over ranks, and the layers that gather the
batch (the MLP, the experts' all-to-all) make every rank wait for the busiest. A batch's
requests are taken as dealt longest first to the least-loaded rank (the best a balancing
scheduler can do within one step): a decode batch splits evenly (ceil(B / ranks) rows), a
lone prefill of L tokens puts all L on one rank.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def busiest_rank_rows(extend_lens: Sequence[int], ranks: int) -> int:
    """Rows of the busiest of `ranks` ranks; the whole batch for one rank."""
    if ranks <= 1:
        return int(sum(extend_lens))
    loads = [0] * ranks   # a min-heap of the ranks' rows
    for length in sorted(extend_lens, reverse=True):
        heapq.heapreplace(loads, loads[0] + int(length))
    return max(loads)
