"""`NewTokenRatio`: how much of each running request's remaining `max_new_tokens` the
admission budget reserves (semantics §5.3). Starts conservative, decays every decode step
without retraction, jumps back up on retraction, resets when the engine goes idle.

`guaranteed_no_evict` (TensorRT-LLM's GUARANTEED_NO_EVICT capacity policy) holds the ratio
at 1.0: a request is admitted only while every running request's whole remaining output
still fits (each reservation clipped at 4096 tokens), so decode does not outgrow the pool
and, for outputs within the clip, nothing is retracted."""

from __future__ import annotations

from shared.batch.schedule_batch import RETRACT_DECODE_STEPS

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600


class NewTokenRatio:
    def __init__(self, schedule_conservativeness: float = 1.0,
                 guaranteed_no_evict: bool = False) -> None:
        self.fixed = guaranteed_no_evict
        self.init = 1.0 if self.fixed else min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        self.min = self.init if self.fixed else self.init * MIN_NEW_TOKEN_RATIO_FACTOR
        self.decay = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.value = self.init

    def on_decode(self) -> None:
        self.value = max(self.value - self.decay, self.min)

    def on_retract(self, decoded_tokens: int, max_new_tokens: int, batch_size: int) -> None:
        """Re-estimate from the requests still running after a retraction (held at 1.0
        under guaranteed_no_evict)."""
        if self.fixed:
            return
        self.value = min(1.0, (decoded_tokens + RETRACT_DECODE_STEPS * batch_size)
                         / (max_new_tokens + 1))

    def on_idle(self) -> None:
        self.value = self.init
