"""`Synthetic`: independent requests with prompt and output lengths fixed or drawn from
length distributions (`shared.workload.length_dist`), rids `r0, r1, ...` in arrival order.

Seeded like every generator: the build draws arrivals, then prompt lengths and tokens, then
output lengths from one `numpy.random.default_rng(seed)`; the tokens are one
`rng.integers(0, vocab_size, size=total)` call, which the build does not hold: its requests
are made on access (`GeneratedRequests` over a `TokenStream`), the same requests an eager
build of those draws makes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from shared.request.sampling_params import SamplingParams
from shared.workload.arrivals import arrival_times
from shared.workload.draw import check_count, generator_config, workload_rng
from shared.workload.generated_requests import GeneratedRequests
from shared.workload.length_dist import LengthDist, as_length_dist
from shared.workload.token_stream import TokenStream
from shared.workload.workload import Workload


@dataclass(frozen=True)
class Synthetic:
    """`num_requests` requests; an int length is `Fixed` (held as a distribution)."""

    num_requests: int
    prompt_len: int | LengthDist
    output_len: int | LengthDist
    sampling_params: SamplingParams | None = None
    name: str = "synthetic"

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]] = (512, 128)   # the CLI's, when not given

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_len", as_length_dist(self.prompt_len))
        object.__setattr__(self, "output_len", as_length_dist(self.output_len))
        check_count(self.num_requests)

    @classmethod
    def from_flags(cls, args, prompt_len: int, output_len: int) -> Synthetic:
        return cls(args.num_requests, prompt_len, output_len)

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload:
        n, template = self.num_requests, self.sampling_params
        rng = workload_rng(seed, vocab_size, rate, burstiness)
        arrivals = arrival_times(rng, n, rate, burstiness)
        prompts = TokenStream.draw(rng, self.prompt_len.sample(rng, n), vocab_size)
        outs = self.output_len.sample(rng, n)
        reqs = GeneratedRequests(arrivals, outs, prompts, template)
        config = generator_config("synthetic", seed, vocab_size, rate, burstiness, template,
                                  num_requests=n, prompt_len=self.prompt_len.to_dict(),
                                  output_len=self.output_len.to_dict())
        return Workload(reqs, self.name, config)
