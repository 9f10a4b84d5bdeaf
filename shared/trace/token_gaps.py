"""`TokenGaps`: a run's pooled inter-token latencies (ITL), accumulated as its steps come in,
chunk by chunk, in memory that does not grow with the run past `exact_limit` gaps.

A request is a row of the run's `RequestTable`. `add(codes, times)` takes a chunk of sampled
rows (each row's request, -1 for a discarded row, and its token time: the end of its step,
in step order); a request's gap to its previous token is kept with its row, the previous
token carried over from earlier chunks (or the time of the outputs it arrived with:
`start_from`). Which requests count is known only when they finish (completed: length or
stop), so gaps are held with their rows until then.

Exact mode (up to `exact_limit` gaps held): `stats` orders the completed requests' gaps by
rid, then time, which is the array `shared.trace.trace_itl.inter_token_latencies` builds
from a whole trace, so the mean and percentiles are bit-identical to it.
Past the limit, the gaps of finished requests go into a `GapSketch` (log-spaced buckets of
relative width `SKETCH_ACCURACY`) and only live requests' gaps stay held: percentiles are then
within SKETCH_ACCURACY (relative) of the exact ones, the mean is a running sum (relative
error ~1e-12), the count exact.
Runs pool their gaps (a fleet's replicas: `pooled`): exact arrays concatenate; a sketch
takes another's counts (`GapSketch.merge`) or values, within the same accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

EXACT_LIMIT = 1 << 22          # gaps held exactly (16 bytes each) before sketching
SETTLE_BATCH = 1 << 18         # gaps held between two settles once sketching
SKETCH_ACCURACY = 1e-4         # relative error of a sketched percentile
PERCENTILES = (50, 90, 99)


class TokenGaps:
    def __init__(self, exact_limit: int = EXACT_LIMIT) -> None:
        self.exact_limit = exact_limit
        self._last = np.full(1024, math.nan)     # [rows] each request's last token time
        self._status = np.zeros(1024, np.int8)   # [rows] 0 live, 1 completed, 2 ended otherwise
        self._largest = np.full(1024, math.nan)  # [rows] each request's largest gap so far
        self._gaps: list[np.ndarray] = []
        self._codes: list[np.ndarray] = []
        self._held = 0
        self._settle_at = exact_limit
        self.sketch: GapSketch | None = None

    def start_from(self, row: int, t: float) -> None:
        """Request `row` arrived with outputs, the last at time `t`: its first gap starts there."""
        self._fit(row)
        self._last[row] = t

    def finished(self, row: int, completed: bool) -> None:
        """Request `row` finished (completed: it counts in the pool)."""
        self._fit(row)
        self._status[row] = 1 if completed else 2

    def add(self, codes: np.ndarray, times: np.ndarray) -> None:
        """A chunk of sampled rows: [N] request rows (-1: discarded) and [N] token times, in
        step order."""
        keep = codes >= 0
        codes, times = codes[keep], times[keep]
        if not len(codes):
            return
        self._fit(int(codes.max()))
        order = np.argsort(codes, kind="stable")                      # by request, then time
        codes, times = codes[order], times[order]
        first = np.empty(len(codes), bool)
        first[0], first[1:] = True, codes[1:] != codes[:-1]            # [N] a request's first row
        gaps = np.empty(len(times))
        gaps[1:] = np.diff(times)
        gaps[first] = times[first] - self._last[codes[first]]          # NaN: its first token
        last = np.append(first[1:], True)                              # [N] a request's last row
        self._last[codes[last]] = times[last]
        ok = ~np.isnan(gaps)
        self._note_largest(gaps, codes, first)
        self._hold(gaps[ok], codes[ok])

    def largest(self, rows: int) -> np.ndarray:
        """[rows] each request's largest gap (NaN: none yet), rows 0 .. rows - 1 (a copy)."""
        self._fit(rows - 1)
        return self._largest[:rows].copy()

    def _note_largest(self, gaps: np.ndarray, codes: np.ndarray, first: np.ndarray) -> None:
        """Keep each request's largest gap: the chunk's rows are grouped by request
        (`first` marks each group's first row; a NaN gap is a request's first token)."""
        starts = np.flatnonzero(first)                                 # [G] group starts
        chunk = np.fmax.reduceat(gaps, starts)                         # [G] NaN: no gap
        rows = codes[starts]
        self._largest[rows] = np.fmax(self._largest[rows], chunk)

    def stats(self, completed: np.ndarray, rank: np.ndarray | None) -> dict[str, float]:
        """`itl_mean`, `itl_p50/p90/p99` over the completed requests' gaps (`completed`: [rows]
        bool; `rank`: [rows] each request's place in rid order, read in exact mode only), NaN
        when there is none."""
        pooled = self.pooled(completed, rank)
        return pooled.stats() if isinstance(pooled, GapSketch) else exact_stats(pooled)

    def pooled(self, completed: np.ndarray, rank: np.ndarray | None) -> np.ndarray | GapSketch:
        """The completed requests' gaps (arguments as `stats`'): in exact mode the [G] array
        `stats` reads (by rid, then time), else the sketch, which takes the completed gaps
        still held. NOTE: asking again gives the same answer (what is not sketched stays held)."""
        gaps, codes = self._take()
        keep = completed[codes] if len(codes) else np.zeros(0, bool)
        if self.sketch is None:
            self._gaps, self._codes, self._held = [gaps], [codes], len(gaps)
            gaps, codes = gaps[keep], codes[keep]
            return gaps[np.argsort(rank[codes], kind="stable")]
        self.sketch.add(gaps[keep])
        self._gaps, self._codes, self._held = [gaps[~keep]], [codes[~keep]], int((~keep).sum())
        return self.sketch

    def _hold(self, gaps: np.ndarray, codes: np.ndarray) -> None:
        self._gaps.append(gaps)
        self._codes.append(codes)
        self._held += len(gaps)
        if self._held > self._settle_at:
            self._settle()

    def _settle(self) -> None:
        """Sketch the gaps of finished requests (completed ones; the others' are dropped) and
        hold only live requests' gaps from now on."""
        if self.sketch is None:
            self.sketch = GapSketch()
        gaps, codes = self._take()
        status = self._status[codes]
        self.sketch.add(gaps[status == 1])
        live = status == 0
        self._gaps, self._codes = [gaps[live]], [codes[live]]
        self._held = int(live.sum())
        # NOTE: once sketching, settle in batches of SETTLE_BATCH: arrays under numpy's 4 MB
        # huge-page threshold, reused by the allocator, not zeroed afresh each time
        self._settle_at = max(SETTLE_BATCH, 2 * self._held)

    def _take(self) -> tuple[np.ndarray, np.ndarray]:
        gaps = np.concatenate(self._gaps) if self._gaps else np.zeros(0)
        codes = np.concatenate(self._codes) if self._codes else np.zeros(0, np.int64)
        self._gaps, self._codes, self._held = [], [], 0
        return gaps, codes

    def _fit(self, row: int) -> None:
        """Grow the per-request arrays to hold `row`."""
        n = len(self._last)
        if row >= n:
            size = max(2 * n, row + 1)
            self._last = np.concatenate((self._last, np.full(size - n, math.nan)))
            self._status = np.concatenate((self._status, np.zeros(size - n, np.int8)))
            self._largest = np.concatenate((self._largest, np.full(size - n, math.nan)))


def exact_stats(values: np.ndarray) -> dict[str, float]:
    """`itl_mean` and `itl_p50/p90/p99` (np.percentile, linear) of `values`; NaN if empty."""
    if values.size == 0:
        return {f"itl_{k}": math.nan for k in ("mean", *(f"p{p}" for p in PERCENTILES))}
    stats = {"itl_mean": float(values.mean())}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        stats[f"itl_p{p}"] = float(v)
    return stats


class GapSketch:
    """Counts of non-negative values in log-spaced buckets: bucket i holds (g^(i-1), g^i]
    with g = (1 + a) / (1 - a), read back as 2 g^i / (g + 1), within a (relative) of every
    value in it; zeros are counted apart. A percentile interpolates, as np.percentile's
    linear method, between the estimates of its two neighbouring ranks."""

    def __init__(self, accuracy: float = SKETCH_ACCURACY) -> None:
        self.gamma = (1 + accuracy) / (1 - accuracy)
        self._log_gamma = math.log(self.gamma)
        self._counts = np.zeros(0, np.int64)     # [buckets] from bucket index `_lo`
        self._lo = 0
        self.zeros = 0
        self.count = 0
        self.total = 0.0

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        self.count += len(values)
        self.total += float(values.sum())
        pos = values[values > 0]
        self.zeros += len(values) - len(pos)
        if not len(pos):
            return
        idx = np.ceil(np.log(pos) / self._log_gamma).astype(np.int64)   # [P] bucket indices
        self._cover(int(idx.min()), int(idx.max()))
        self._counts += np.bincount(idx - self._lo, minlength=len(self._counts))

    def merge(self, other: GapSketch) -> None:
        """Count `other`'s values too (a sketch of the same accuracy; ValueError otherwise)."""
        if other.gamma != self.gamma:
            raise ValueError(f"cannot merge sketches of bucket ratios {other.gamma} and {self.gamma}")
        self.count += other.count
        self.total += other.total
        self.zeros += other.zeros
        if len(other._counts):
            self._cover(other._lo, other._lo + len(other._counts) - 1)
            start = other._lo - self._lo
            self._counts[start:start + len(other._counts)] += other._counts

    def stats(self) -> dict[str, float]:
        if not self.count:
            return exact_stats(np.zeros(0))
        stats = {"itl_mean": self.total / self.count}
        for p in PERCENTILES:
            h = (self.count - 1) * p / 100
            k = math.floor(h)
            lo, hi = self._value_at(k), self._value_at(min(k + 1, self.count - 1))
            stats[f"itl_p{p}"] = lo + (h - k) * (hi - lo)
        return stats

    def _value_at(self, k: int) -> float:
        """The estimate of the k-th smallest value (0-based)."""
        if k < self.zeros:
            return 0.0
        bucket = int(np.searchsorted(np.cumsum(self._counts), k - self.zeros, side="right"))
        return 2 * self.gamma ** (bucket + self._lo) / (self.gamma + 1)

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the bucket range to [lo, hi]."""
        if not len(self._counts):
            self._counts, self._lo = np.zeros(hi - lo + 1, np.int64), lo
            return
        new_lo, new_hi = min(lo, self._lo), max(hi, self._lo + len(self._counts) - 1)
        if (new_lo, new_hi) != (self._lo, self._lo + len(self._counts) - 1):
            counts = np.zeros(new_hi - new_lo + 1, np.int64)
            counts[self._lo - new_lo:self._lo - new_lo + len(self._counts)] = self._counts
            self._counts, self._lo = counts, new_lo


def pool_gaps(parts: Sequence[np.ndarray | GapSketch]) -> np.ndarray | GapSketch:
    """Several runs' pooled gaps (`TokenGaps.pooled`, or a trace's array) as one: the arrays
    concatenated in order when every part is exact, else one new sketch of them all."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts) if parts else np.zeros(0)
    sketch = GapSketch()
    for p in parts:
        if isinstance(p, GapSketch):
            sketch.merge(p)
        else:
            sketch.add(p)
    return sketch
