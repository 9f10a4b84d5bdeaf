"""The `ModelRunner` interface both executors implement (semantics §9), and its output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from shared.batch.logit_rows import LogitRows

if TYPE_CHECKING:
    from shared.batch.forward_batch import ForwardBatch


@dataclass(frozen=True)
class RunnerOutput:
    """What `forward` returns.

    `logit_rows`: the rows the runner actually turned into logits (the spec's
    `select_logit_rows` of the batch). `logits`: [B, V] float32 next-token logits
    (a torch tensor in exec/), or None when the runner only prices the batch (sim/);
    `logits_shape` is (B, V) either way. `input_token_logprobs`: [L] float32 for the rows
    in `logit_rows.input_logprob_indices`, when the batch asked for input logprobs;
    `input_top_logprobs`: for those rows, (token ids, logprobs) of the top
    `top_logprobs_num` tokens of the row's request (empty when it asked for none).
    `graph`: whether a captured graph ran; `padded_batch_size`: the batch size it ran at
    (> B only when a graph padded it; by default B, `logits_shape[0]`, so an eager runner
    that leaves it out conforms). `duration`: seconds the runner reports for the step (measured or priced), if any."""

    logit_rows: LogitRows
    logits_shape: tuple[int, int]
    logits: Any = None
    input_token_logprobs: Any = None
    input_top_logprobs: Any = None
    graph: bool = False
    padded_batch_size: int | None = None
    duration: float | None = None

    def __post_init__(self) -> None:
        if self.padded_batch_size is None:
            object.__setattr__(self, "padded_batch_size", self.logits_shape[0])


class ModelRunner(Protocol):
    """Executes the spec's ForwardBatches. Both executors implement it.

    Contract:
    - `forward(fb)` runs (or prices) the batch: K/V for token t is written at slot
      `fb.out_cache_loc[t]`, at position `fb.positions[t]`; request i reads its history
      through `fb.req_to_token[fb.req_pool_indices[i], :fb.seq_lens[i]]` and never another
      request's rows. It must use exactly `select_logit_rows(...)` of the batch.
    - `sample(output, fb)` returns next_token_ids [B] int64, one per request, in batch
      order, each in [0, vocab_size). Randomness comes only from the batch's per-request
      seeds. The scheduler discards the token of an intermediate prefill chunk.
    """

    def forward(self, forward_batch: ForwardBatch) -> RunnerOutput: ...

    def sample(self, output: RunnerOutput, forward_batch: ForwardBatch) -> np.ndarray: ...
