"""Closed-loop conversations: a turn is sent a think time after the reply to the previous
turn came back, and re-sends the whole history (previous prompt, the reply the engine
actually produced, a new user message), as a chat client does.

`FollowUp` is a turn not sent yet: the rid of the turn it answers, the think time, its user
message and sampling parameters. The driver materialises it when that turn finishes
normally (`request(...)`, at the reply's time: the end of the step that sampled its last
token); a turn that ends otherwise (aborted, refused) ends its conversation.
`sessions(...)` draws the conversations: first turns on the arrival process, later ones as
follow-ups. Seeded: same seed, same user messages and think times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.request.sampling_params import SamplingParams
from shared.workload.length_dist import LengthDist, as_length_dist
from shared.workload.workload import (
    Workload,
    WorkloadRequest,
    _config,
    _params,
    _rng,
    _tokens,
    arrival_times,
)


@dataclass(frozen=True)
class FollowUp:
    rid: str
    after: str                      # the turn whose reply this one waits for
    think_time: float               # seconds from that reply to this turn's arrival
    user_ids: tuple[int, ...]
    sampling_params: SamplingParams

    def __post_init__(self) -> None:
        if not (math.isfinite(self.think_time) and self.think_time >= 0):
            raise ValueError(f"follow-up {self.rid!r}: think_time must be finite and >= 0 s, "
                             f"got {self.think_time!r}")

    def request(self, prompt: Sequence[int], reply: Sequence[int],
                reply_time: float) -> WorkloadRequest:
        """The turn, sent `think_time` after `reply_time`, re-sending prompt + reply."""
        return WorkloadRequest(self.rid, reply_time + self.think_time,
                               (*prompt, *reply, *self.user_ids), self.sampling_params)

    def to_dict(self) -> dict[str, Any]:
        return {"rid": self.rid, "after": self.after, "think_time": self.think_time,
                "user_ids": list(self.user_ids),
                "sampling_params": self.sampling_params.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FollowUp:
        return cls(d["rid"], d["after"], float(d["think_time"]), tuple(d["user_ids"]),
                   SamplingParams.from_dict(d["sampling_params"]))


def sessions(num_conversations: int, turns: int, *, vocab_size: int,
             user_len: int | LengthDist = 64, output_len: int | LengthDist = 128,
             think_time: float = 1.0, seed: int = 0, rate: float = math.inf,
             burstiness: float = 1.0, sampling_params: SamplingParams | None = None,
             name: str = "sessions") -> Workload:
    """`num_conversations` conversations of `turns` turns (rids `c{conv}-t{k}`): starts on the
    arrival process, each later turn an exponential think time (mean `think_time` s) after
    the previous reply."""
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ValueError(f"turns must be an integer >= 1, got {turns!r}")
    if not (math.isfinite(think_time) and think_time >= 0):
        raise ValueError(f"think_time must be finite and >= 0 s, got {think_time!r}")
    rng = _rng(seed, vocab_size, rate, burstiness, num_conversations * turns)
    u_dist, o_dist = as_length_dist(user_len), as_length_dist(output_len)
    starts = arrival_times(rng, num_conversations, rate, burstiness).tolist()
    users = u_dist.sample(rng, num_conversations * turns).tolist()
    outs = o_dist.sample(rng, num_conversations * turns).tolist()
    gaps = rng.exponential(think_time, size=num_conversations * turns).tolist()
    first, later = [], []
    for c in range(num_conversations):
        for k in range(turns):
            i = c * turns + k
            message, params = _tokens(rng, users[i], vocab_size), _params(sampling_params, outs[i])
            if k == 0:
                first.append(WorkloadRequest(f"c{c}-t0", float(starts[c]), message, params))
            else:
                later.append(FollowUp(f"c{c}-t{k}", f"c{c}-t{k - 1}", float(gaps[i]), message,
                                      params))
    config = _config("sessions", seed, vocab_size, rate, burstiness, sampling_params,
                     num_conversations=num_conversations, turns=turns,
                     user_len=u_dist.to_dict(), output_len=o_dist.to_dict(),
                     think_time=think_time)
    return Workload(tuple(first), name, config, tuple(later))
