"""`ExpertRouting`: how a step's tokens spread over the routed experts, as the roofline
needs it: the (token, expert) pairs the busiest expert-parallel rank computes and the
distinct experts whose weights it reads.

Popularity: expert i (in popularity order) is chosen by a token with probability
q_i = min(1, k * p_i), p_i proportional to (i + 1)^-s (a Zipf law; s = 0 is uniform routing,
q_i = k / E exactly). Over T tokens, routed independently, expert i is touched with
probability 1 - (1 - q_i)^T, so the expected number of distinct experts is the sum of that
over the experts (E (1 - (1 - k/E)^T) when uniform: every expert once T is large).

Placement: experts are dealt to the ep ranks in popularity order (rank r holds popularity
ranks r, r + ep, r + 2 ep, ...), as a static load balancer would place them; rank 0 is then
the busiest in both pairs and distinct experts, and a step waits for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


class ExpertLoad(NamedTuple):
    """Per sparse layer, on the busiest EP rank."""

    pairs: float     # (token, expert) pairs routed to its experts (expected)
    experts: float   # distinct experts among them (expected)


@dataclass(frozen=True)
class ExpertRouting:
    num_experts: int
    experts_per_token: int
    ep_size: int = 1
    zipf_exponent: float = 0.0     # s above; 0: uniform routing
    _rank_q: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        s = self.zipf_exponent
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and s >= 0):
            raise ValueError(f"expert_zipf (a Zipf exponent over experts) must be a finite "
                             f"number >= 0, got {s!r}")
        if self.num_experts % self.ep_size:
            raise ValueError(f"ep_size={self.ep_size} does not divide {self.num_experts} experts")
        p = np.arange(1, self.num_experts + 1, dtype=np.float64) ** -float(s)
        q = np.minimum(1.0, self.experts_per_token * p / p.sum())
        # NOTE: a derived constant of the frozen fields: the busiest rank's experts.
        object.__setattr__(self, "_rank_q", q[0::self.ep_size])

    def load(self, tokens: int) -> ExpertLoad:
        """The busiest rank's expected load for a step of `tokens` token rows."""
        q = self._rank_q
        return ExpertLoad(float(tokens * q.sum()), float(np.sum(1.0 - (1.0 - q) ** tokens)))

    @property
    def busiest_share(self) -> float:
        """Fraction of all routed pairs the busiest rank computes (1 / ep when uniform)."""
        return float(self._rank_q.sum()) / self.experts_per_token
