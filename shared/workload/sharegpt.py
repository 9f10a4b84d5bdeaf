"""`ShareGPTLike`: a synthetic mix shaped like ShareGPT: prompt and output lengths lognormal
with medians 200 and sigma 1.0 (means ~330, a heavy right tail: p99 ~ 2000 before clipping),
each clipped to `max_len // 2` so prompt + output <= `max_len` (vllm's ShareGPT filter keeps
prompts <= 1024 and prompt + output <= 2048). Drawn as `Synthetic` with those
distributions (same rids, same draws); its config records the medians, sigma and max_len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from shared.request.sampling_params import SamplingParams
from shared.workload.length_dist import LogNormal
from shared.workload.synthetic import Synthetic
from shared.workload.workload import Workload

SHAREGPT_MAX_LEN = 2048


@dataclass(frozen=True)
class ShareGPTLike:
    num_requests: int
    prompt_median: float = 200.0
    output_median: float = 200.0
    sigma: float = 1.0
    max_len: int = SHAREGPT_MAX_LEN
    sampling_params: SamplingParams | None = None
    name: str = "sharegpt_like"

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]] = (200, 200)   # the CLI's medians, when not given

    def __post_init__(self) -> None:
        self.synthetic()

    @classmethod
    def from_flags(cls, args, prompt_len: int, output_len: int) -> ShareGPTLike:
        return cls(args.num_requests, prompt_median=prompt_len, output_median=output_len)

    def synthetic(self) -> Synthetic:
        """The same traffic as a `Synthetic` spec (the lognormal length distributions)."""
        cap = self.max_len // 2
        return Synthetic(self.num_requests, LogNormal(self.prompt_median, self.sigma, cap),
                         LogNormal(self.output_median, self.sigma, cap), self.sampling_params,
                         self.name)

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload:
        w = self.synthetic().build(vocab_size=vocab_size, seed=seed, rate=rate,
                                   burstiness=burstiness)
        config = {**w.config, "generator": "sharegpt_like", "prompt_median": self.prompt_median,
                  "output_median": self.output_median, "sigma": self.sigma,
                  "max_len": self.max_len}
        return Workload(w.requests, self.name, config)
