"""`GenerateOutput`: what `Engine.generate` returns per prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.request.finish_reason import FinishReason


@dataclass
class GenerateOutput:
    """`text` is None when the model has no tokenizer. `input_token_logprobs` (when asked)
    has one entry per prompt token from `logprob_start_len`, the first None (nothing
    predicts it), as SGLang; `output_token_logprobs` one per generated token, and with
    `top_logprobs_num` > 0 `output_top_logprobs` its top (token id, logprob) pairs.
    `meta`: prompt_tokens, cached_tokens, completion_tokens, ttft and e2e (seconds)."""

    rid: str
    text: str | None
    token_ids: list[int]
    finish_reason: FinishReason | None
    input_token_logprobs: list[float | None] | None = None
    input_top_logprobs: list[Any] | None = None
    output_token_logprobs: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    output_top_logprobs: list[Any] | None = None
