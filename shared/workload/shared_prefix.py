"""`SharedPrefix`: SGLang's `generated-shared-prefix`. Each group has a random system prompt
(its length drawn once per group when a distribution is given); each prompt (rid
`g{group}-p{index}`) is that system prompt + its own random question. The prompts are
shuffled by the seed, then given arrivals in that order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

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
class SharedPrefix:
    num_groups: int
    prompts_per_group: int
    system_prompt_len: int | LengthDist
    question_len: int | LengthDist
    output_len: int | LengthDist
    sampling_params: SamplingParams | None = None
    name: str = "generated_shared_prefix"

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]] = (128, 256)   # the CLI's question, output

    def __post_init__(self) -> None:
        for length in ("system_prompt_len", "question_len", "output_len"):
            object.__setattr__(self, length, as_length_dist(getattr(self, length)))
        check_count(self.num_groups * self.prompts_per_group)

    @classmethod
    def from_flags(cls, args, prompt_len: int, output_len: int) -> SharedPrefix:
        """`--num-requests` prompts over `--num-groups` groups (the remainder dropped)."""
        if not 1 <= args.num_groups <= args.num_requests:
            raise ValueError(f"--num-groups must be in [1, --num-requests], got {args.num_groups}")
        return cls(args.num_groups, args.num_requests // args.num_groups, args.system_prompt_len,
                   prompt_len, output_len)

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload:
        groups, per_group, template = self.num_groups, self.prompts_per_group, self.sampling_params
        n = groups * per_group
        rng = workload_rng(seed, vocab_size, rate, burstiness)
        systems = token_lists(rng, self.system_prompt_len.sample(rng, groups), vocab_size)
        questions = token_lists(rng, self.question_len.sample(rng, n), vocab_size)
        outs = self.output_len.sample(rng, n).tolist()
        order = rng.permutation(n).tolist()
        arrivals = arrival_times(rng, n, rate, burstiness)
        reqs = [WorkloadRequest(f"g{i // per_group}-p{i % per_group}", float(arrivals[k]),
                                systems[i // per_group] + questions[i],
                                request_params(template, outs[i]))
                for k, i in enumerate(order)]
        config = generator_config("generated_shared_prefix", seed, vocab_size, rate, burstiness,
                                  template, num_groups=groups, prompts_per_group=per_group,
                                  system_prompt_len=self.system_prompt_len.to_dict(),
                                  question_len=self.question_len.to_dict(),
                                  output_len=self.output_len.to_dict())
        return Workload(tuple(reqs), self.name, config)
