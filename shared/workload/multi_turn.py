"""`MultiTurn`: open-loop conversations that re-send their history. Conversation starts
follow the arrival process; turn k (rid `c{conv}-t{k}`) arrives an exponential think time
(mean `think_time` s) after turn k-1 arrived, and its prompt is turn k-1's prompt + a random
assistant answer of turn k-1's output length + a new user message.

NOTE: open loop: a turn does not wait for the previous answer, and the executor's real
answer differs from the synthetic one, so only the previous prompt is a guaranteed
prefix-cache hit (`shared.workload.sessions` is the closed-loop kind).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from shared.request.sampling_params import SamplingParams
from shared.workload.arrivals import arrival_times
from shared.workload.draw import (
    check_count,
    generator_config,
    request_params,
    tokens,
    workload_rng,
)
from shared.workload.length_dist import LengthDist, as_length_dist
from shared.workload.workload import Workload, WorkloadRequest


@dataclass(frozen=True)
class MultiTurn:
    num_conversations: int
    turns: int
    user_len: int | LengthDist = 64
    output_len: int | LengthDist = 128
    think_time: float = 1.0
    sampling_params: SamplingParams | None = None
    name: str = "multi_turn"

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]] = (64, 128)   # the CLI's user, output

    def __post_init__(self) -> None:
        if not self.think_time >= 0:
            raise ValueError(f"think_time must be >= 0 seconds, got {self.think_time!r}")
        object.__setattr__(self, "user_len", as_length_dist(self.user_len))
        object.__setattr__(self, "output_len", as_length_dist(self.output_len))
        check_count(self.num_conversations * self.turns)

    @classmethod
    def from_flags(cls, args, prompt_len: int, output_len: int) -> MultiTurn:
        """`--num-requests` conversations of `--turns` turns."""
        return cls(args.num_requests, args.turns, user_len=prompt_len, output_len=output_len,
                   think_time=args.think_time)

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload:
        convs, template = self.num_conversations, self.sampling_params
        rng = workload_rng(seed, vocab_size, rate, burstiness)
        starts = arrival_times(rng, convs, rate, burstiness)
        shape = (convs, self.turns)
        users = self.user_len.sample(rng, convs * self.turns).reshape(shape).tolist()
        outs = self.output_len.sample(rng, convs * self.turns).reshape(shape).tolist()
        gaps = rng.exponential(self.think_time, size=shape).tolist()
        reqs = [r for c in range(convs)
                for r in _conversation(rng, c, float(starts[c]), users[c], outs[c], gaps[c],
                                       vocab_size, template)]
        config = generator_config("multi_turn", seed, vocab_size, rate, burstiness, template,
                                  num_conversations=convs, turns=self.turns,
                                  user_len=self.user_len.to_dict(),
                                  output_len=self.output_len.to_dict(),
                                  think_time=self.think_time)
        return Workload(tuple(reqs), self.name, config)


def _conversation(rng: np.random.Generator, c: int, start: float, users: list[int],
                  outs: list[int], gaps: list[float], vocab_size: int,
                  template: SamplingParams | None) -> Iterable[WorkloadRequest]:
    history: tuple[int, ...] = ()
    t = start
    for k, (u, o) in enumerate(zip(users, outs, strict=True)):
        if k:
            t += gaps[k]
            history += tokens(rng, outs[k - 1], vocab_size)
        history += tokens(rng, u, vocab_size)
        yield WorkloadRequest(f"c{c}-t{k}", t, history, request_params(template, o))
