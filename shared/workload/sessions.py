"""`Sessions`: closed-loop conversations. A turn is sent a think time after the reply to the
previous turn came back, and re-sends the whole history (previous prompt, the reply the
engine actually produced, a new user message), as a chat client does.

`num_conversations` conversations of `turns` turns (rids `c{conv}-t{k}`): first turns on
the arrival process, each later one a `FollowUp` (`shared.workload.workload`) sent an
exponential think time (mean `think_time` s) after the previous reply. Seeded: same seed,
same user messages and think times.
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
    tokens,
    workload_rng,
)
from shared.workload.length_dist import LengthDist, as_length_dist
from shared.workload.workload import FollowUp, Workload, WorkloadRequest


@dataclass(frozen=True)
class Sessions:
    num_conversations: int
    turns: int
    user_len: int | LengthDist = 64
    output_len: int | LengthDist = 128
    think_time: float = 1.0
    sampling_params: SamplingParams | None = None
    name: str = "sessions"

    DEFAULT_LENGTHS: ClassVar[tuple[int, int]] = (64, 128)   # the CLI's user, output

    def __post_init__(self) -> None:
        turns = self.turns
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise ValueError(f"turns must be an integer >= 1, got {turns!r}")
        if not (math.isfinite(self.think_time) and self.think_time >= 0):
            raise ValueError(f"think_time must be finite and >= 0 s, got {self.think_time!r}")
        object.__setattr__(self, "user_len", as_length_dist(self.user_len))
        object.__setattr__(self, "output_len", as_length_dist(self.output_len))
        check_count(self.num_conversations * turns)

    @classmethod
    def from_flags(cls, args, prompt_len: int, output_len: int) -> Sessions:
        """`--num-requests` conversations of `--turns` turns."""
        return cls(args.num_requests, args.turns, user_len=prompt_len, output_len=output_len,
                   think_time=args.think_time)

    def build(self, *, vocab_size: int, seed: int = 0, rate: float = math.inf,
              burstiness: float = 1.0) -> Workload:
        convs, turns, template = self.num_conversations, self.turns, self.sampling_params
        rng = workload_rng(seed, vocab_size, rate, burstiness)
        starts = arrival_times(rng, convs, rate, burstiness).tolist()
        users = self.user_len.sample(rng, convs * turns).tolist()
        outs = self.output_len.sample(rng, convs * turns).tolist()
        gaps = rng.exponential(self.think_time, size=convs * turns).tolist()
        first, later = [], []
        for c in range(convs):
            for k in range(turns):
                i = c * turns + k
                message = tokens(rng, users[i], vocab_size)
                params = request_params(template, outs[i])
                if k == 0:
                    first.append(WorkloadRequest(f"c{c}-t0", float(starts[c]), message, params))
                else:
                    later.append(FollowUp(f"c{c}-t{k}", f"c{c}-t{k - 1}", float(gaps[i]),
                                          message, params))
        config = generator_config("sessions", seed, vocab_size, rate, burstiness, template,
                                  num_conversations=convs, turns=turns,
                                  user_len=self.user_len.to_dict(),
                                  output_len=self.output_len.to_dict(),
                                  think_time=self.think_time)
        return Workload(tuple(first), self.name, config, tuple(later))
