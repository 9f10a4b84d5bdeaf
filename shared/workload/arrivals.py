"""When requests arrive: `arrival_times` follows `vllm bench serve`.

Gaps are gamma with shape `burstiness` and scale `1 / (rate * burstiness)` (mean `1/rate`;
burstiness 1 is Poisson, < 1 burstier, > 1 smoother, inf constant gaps), the first request
arrives after one gap, and `rate=inf` puts every arrival at t=0. Unlike vllm we do not
rescale the arrivals so the last lands exactly at `n / rate`: gaps are the raw gamma draws.
"""

from __future__ import annotations

import math

import numpy as np


def arrival_times(rng: np.random.Generator, n: int, rate: float,
                  burstiness: float = 1.0) -> np.ndarray:
    """[n] float64 arrival times (s): cumulative gamma gaps, mean gap 1/rate (module doc)."""
    check_arrivals(rate, burstiness)
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        return np.cumsum(np.full(n, 1.0 / rate))
    return np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n))


def check_arrivals(rate: float, burstiness: float) -> None:
    """ValueError unless rate > 0 (inf allowed) and burstiness > 0."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s (inf: all at t=0), got {rate!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0 (1 is Poisson), got {burstiness!r}")
