"""Causal extend (prefill) attention on the SMs: FlashAttention's work per query tile, and a
lower bound on the time its thread blocks take over the SMs.

FlashAttention runs one thread block (CTA) per (query tile of QUERY_TILE rows, head): it
walks the key tiles up to the tile's last row and, under the causal mask, skips the key
tiles above the diagonal (FlashAttention-2, Dao 2023, arXiv 2307.08691, section 3.1.1
"Causal masking"; the FlashAttention-3 kernels SGLang runs on Hopper do the same). So a
tile's work is its rows' causal (query, key) pairs: row r of an extend after p cached tokens
scores p + r + 1 keys, and the last tile of a long prefill does about twice the average.

The CTAs run on the SMs, each SM at 1 / num_sms of the attention rate (`tiled_makespan`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

QUERY_TILE = 128   # FlashAttention's query rows per thread block
TILE_STEP = QUERY_TILE * QUERY_TILE   # pairs one full tile scores beyond the one before


def query_tile_pairs(prefix_lens: Sequence[int], extend_lens: Sequence[int]) -> list[int]:
    """[tiles] the causal pairs each query tile scores, one head: per request, tiles of
    QUERY_TILE rows from its first new token (the last one partial); rows a..b-1 after p
    cached tokens score sum over r of (p + r + 1) = (b - a) (p + (a + b + 1) / 2) keys."""
    tiles: list[int] = []
    for p, e in zip(prefix_lens, extend_lens, strict=True):
        if e <= QUERY_TILE:
            tiles.append(e * p + e * (e + 1) // 2)
            continue
        full, rest = divmod(e, QUERY_TILE)
        # NOTE: full tiles are an arithmetic series: each scores QUERY_TILE more keys a row.
        first = QUERY_TILE * p + QUERY_TILE * (QUERY_TILE + 1) // 2
        tiles.extend(range(first, first + full * TILE_STEP, TILE_STEP))
        if rest:
            a = full * QUERY_TILE
            tiles.append(rest * p + rest * (2 * a + rest + 1) // 2)
    return tiles


def tiled_makespan(works: Sequence[int], copies: float, slots: int) -> float:
    """A lower bound on the time `copies` units of each work in `works` (each head's copy of
    a tile) take on `slots` processors (the SMs), in units of one processor's time per unit
    of work: the largest of
    - the total work / slots (every processor busy to the end), and
    - (k + 1) x the (k * slots + 1)-th largest unit, every k >= 0: of the k * slots + 1
      largest units some processor runs k + 1 (pigeonhole). k = 0 is the longest tile; for
      equal units the last k is the wave count, ceil(units / slots) units.

    NOTE: every term grows when a unit grows or one is added (the works sorted largest first
    only rise, element by element), so a forward that does another's work and more never
    costs less. It is a lower bound: the GPU's block scheduler starts a waiting CTA as soon as
    an SM frees, and the causal kernels start the longest tiles first (FlashAttention's
    SingleTileLPTScheduler, lpt=is_causal in flash_fwd_sm90.py, as vendored in SGLang
    0.5.23), which ends within about one unit of it. With fractional `copies` (an
    attention-DP rank's share of the heads' tiles) the k-th unit is the tile
    floor(k * slots / copies)."""
    if copies * len(works) <= slots:   # one wave: the longest unit (the total / slots is less)
        return float(max(works, default=0))
    ordered = sorted(works, reverse=True)
    even, last = copies * sum(ordered) / slots, len(ordered) - 1
    best = max(even, ordered[0])
    for k in range(1, math.ceil(copies * len(ordered) / slots)):
        work = ordered[min(last, int(k * slots / copies))]
        if (k + 1) * work > best:
            best = (k + 1) * work
        elif even + work <= best:
            # NOTE: every later term is below even + its work (k x the k-th unit is at most
            # the total of the larger units / slots), and the works only fall from here.
            break
    return best
