"""The eager `Synthetic` build, the reference the generated (made-on-access) requests are
held to: the same draws from one `numpy.random.default_rng(seed)` (arrivals, prompt lengths,
all tokens in one `rng.integers` call, output lengths), every request held in a tuple."""

from __future__ import annotations

import math

from shared.workload.arrivals import arrival_times
from shared.workload.draw import request_params, token_lists, workload_rng
from shared.workload.synthetic import Synthetic
from shared.workload.workload import WorkloadRequest


def eager_requests(spec: Synthetic, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
                   burstiness: float = 1.0) -> tuple[WorkloadRequest, ...]:
    """The requests `spec.build(...)` made before builds made them on access."""
    n, template = spec.num_requests, spec.sampling_params
    rng = workload_rng(seed, vocab_size, rate, burstiness)
    arrivals = arrival_times(rng, n, rate, burstiness)
    prompts = token_lists(rng, spec.prompt_len.sample(rng, n), vocab_size)
    outs = spec.output_len.sample(rng, n).tolist()
    return tuple(WorkloadRequest(f"r{i}", float(arrivals[i]), prompts[i],
                                 request_params(template, outs[i]))
                 for i in range(n))
