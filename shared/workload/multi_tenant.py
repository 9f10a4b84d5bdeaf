"""`MultiTenant`: shared-prefix traffic from K tenants of uneven popularity, the workload a
prefix-aware router is for.

Each tenant has its own random system prompt (`system_prompt_len` tokens); each request
belongs to tenant k with probability proportional to 1 / (k + 1) ** zipf (zipf 0: all alike;
1: the first tenant twice as busy as the second), and is that system prompt plus a question
of its own. Arrivals follow the shared arrival process (rate, burstiness); rids are
`t{tenant}-r{index}`. Seeded like every workload generator: same seed, same requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from shared.request.sampling_params import SamplingParams
from shared.workload.arrivals import arrival_times
from shared.workload.draw import (
    check_count,
    generator_config,
    request_params,
    token_lists,
    workload_rng,
)
from shared.workload.length_dist import LengthDist, as_length_dist
from shared.workload.workload import Workload, WorkloadRequest


@dataclass(frozen=True)
class MultiTenant:
    """`num_requests` requests over `num_tenants` system prompts (module doc)."""

    num_requests: int
    num_tenants: int
    system_prompt_len: int | LengthDist
    question_len: int | LengthDist
    output_len: int | LengthDist
    zipf: float = 1.0
    sampling_params: SamplingParams | None = None
    name: str = "multi_tenant"

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]] = (128, 256)   # the CLI's question, output

    def __post_init__(self) -> None:
        k = self.num_tenants
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"num_tenants must be an integer >= 1, got {k!r}")
        if not (math.isfinite(self.zipf) and self.zipf >= 0):
            raise ValueError(f"zipf must be a finite number >= 0, got {self.zipf!r}")
        for length in ("system_prompt_len", "question_len", "output_len"):
            object.__setattr__(self, length, as_length_dist(getattr(self, length)))
        check_count(self.num_requests)

    @classmethod
    def from_flags(cls, args, prompt_len: int, output_len: int) -> MultiTenant:
        """`--num-groups` tenants, `--tenant-zipf` their popularity."""
        return cls(args.num_requests, args.num_groups, args.system_prompt_len, prompt_len,
                   output_len, zipf=args.tenant_zipf)

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload:
        n, k, template = self.num_requests, self.num_tenants, self.sampling_params
        rng = workload_rng(seed, vocab_size, rate, burstiness)
        systems = token_lists(rng, self.system_prompt_len.sample(rng, k), vocab_size)
        weights = 1.0 / np.arange(1, k + 1) ** self.zipf
        tenants = rng.choice(k, size=n, p=weights / weights.sum()).tolist()
        questions = token_lists(rng, self.question_len.sample(rng, n), vocab_size)
        outs = self.output_len.sample(rng, n).tolist()
        arrivals = arrival_times(rng, n, rate, burstiness)
        reqs = tuple(WorkloadRequest(f"t{t}-r{i}", float(arrivals[i]), systems[t] + questions[i],
                                     request_params(template, outs[i]))
                     for i, t in enumerate(tenants))
        config = generator_config("multi_tenant", seed, vocab_size, rate, burstiness, template,
                                  num_requests=n, num_tenants=k, zipf=self.zipf,
                                  system_prompt_len=self.system_prompt_len.to_dict(),
                                  question_len=self.question_len.to_dict(),
                                  output_len=self.output_len.to_dict())
        return Workload(reqs, self.name, config)
