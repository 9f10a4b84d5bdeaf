"""The OpenAI `/v1/completions` and `/v1/chat/completions` request bodies (pydantic), and
what the engine takes from them:
the prompt's ids and `shared.SamplingParams`. Unknown fields are ignored as OpenAI's API
ignores them; a field of the wrong type is a 400 naming it (`experiments.serve.errors`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict

from shared.request.sampling_params import SamplingParams


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """The fields both endpoints share (sampling, streaming, n)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    logprobs: int | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None

    def sampling_params(self) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        return SamplingParams(
            max_new_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
            top_k=self.top_k, min_p=self.min_p, frequency_penalty=self.frequency_penalty,
            presence_penalty=self.presence_penalty, repetition_penalty=self.repetition_penalty,
            stop=tuple(stop) if stop else None, sampling_seed=self.seed, n=self.n,
            ignore_eos=self.ignore_eos, return_logprob=self.logprobs is not None,
            top_logprobs_num=self.logprobs or 0)

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    prompt: str | list[int]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str


class ChatRequest(SamplingFields):
    """`/v1/chat/completions`; `max_completion_tokens` (OpenAI's newer name) wins over
    `max_tokens`; `logprobs` is a flag here and `top_logprobs` the count."""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None

    def sampling_params(self) -> SamplingParams:
        params = dataclasses.replace(super().sampling_params(), return_logprob=self.logprobs,
                                     top_logprobs_num=self.top_logprobs or 0)
        if self.max_completion_tokens is None:
            return params
        return dataclasses.replace(params, max_new_tokens=self.max_completion_tokens)

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs


def usage(prompt_tokens: int, completion_tokens: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}
