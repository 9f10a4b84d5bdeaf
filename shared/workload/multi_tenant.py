"""`multi_tenant`: shared-prefix traffic from K tenants of uneven popularity, the workload a
prefix-aware router is for.

Each tenant has its own random system prompt (`system_prompt_len` tokens); each request
belongs to tenant k with probability proportional to 1 / (k + 1) ** zipf (zipf 0: all alike;
1: the first tenant twice as busy as the second), and is that system prompt plus a question
of its own. Arrivals follow the shared arrival process (rate, burstiness); rids are
`t{tenant}-r{index}`. Seeded like every workload generator: same seed, same requests.
"""

from __future__ import annotations

import math

import numpy as np

from shared.request.sampling_params import SamplingParams
from shared.workload.length_dist import LengthDist, as_length_dist
from shared.workload.workload import (
    Workload,
    WorkloadRequest,
    _config,
    _params,
    _rng,
    _token_lists,
    arrival_times,
)


def multi_tenant(num_requests: int, num_tenants: int, system_prompt_len: int | LengthDist,
                 question_len: int | LengthDist, output_len: int | LengthDist, *,
                 vocab_size: int, zipf: float = 1.0, seed: int = 0, rate: float = math.inf,
                 burstiness: float = 1.0, sampling_params: SamplingParams | None = None,
                 name: str = "multi_tenant") -> Workload:
    """`num_requests` requests over `num_tenants` system prompts (module doc)."""
    if isinstance(num_tenants, bool) or not isinstance(num_tenants, int) or num_tenants < 1:
        raise ValueError(f"num_tenants must be an integer >= 1, got {num_tenants!r}")
    if not (math.isfinite(zipf) and zipf >= 0):
        raise ValueError(f"zipf must be a finite number >= 0, got {zipf!r}")
    rng = _rng(seed, vocab_size, rate, burstiness, num_requests)
    sys_dist, q_dist, o_dist = map(as_length_dist, (system_prompt_len, question_len, output_len))
    systems = _token_lists(rng, sys_dist.sample(rng, num_tenants), vocab_size)
    weights = 1.0 / np.arange(1, num_tenants + 1) ** zipf
    tenants = rng.choice(num_tenants, size=num_requests, p=weights / weights.sum()).tolist()
    questions = _token_lists(rng, q_dist.sample(rng, num_requests), vocab_size)
    outs = o_dist.sample(rng, num_requests).tolist()
    arrivals = arrival_times(rng, num_requests, rate, burstiness)
    reqs = tuple(WorkloadRequest(f"t{t}-r{i}", float(arrivals[i]), systems[t] + questions[i],
                                 _params(sampling_params, outs[i]))
                 for i, t in enumerate(tenants))
    config = _config("multi_tenant", seed, vocab_size, rate, burstiness, sampling_params,
                     num_requests=num_requests, num_tenants=num_tenants, zipf=zipf,
                     system_prompt_len=sys_dist.to_dict(), question_len=q_dist.to_dict(),
                     output_len=o_dist.to_dict())
    return Workload(reqs, name, config)
