"""Per-request sampling parameters, with SGLang's defaults and normalisation (semantics §2.2).

Construction normalises; `validate(vocab_size)` checks ranges and raises
`InvalidRequestError` naming the offending field. Construction never rejects: a request
is refused by validation, before anything is allocated for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.invalid_request import InvalidRequestError

TOP_K_ALL = 1 << 30
GREEDY_TEMPERATURE_EPS = 1e-6
UNSUPPORTED_GRAMMARS = ("regex", "json_schema", "ebnf")


@dataclass(frozen=True)
class SamplingParams:
    """What to generate and how to sample it. `None` for a parameter means its default.

    NOTE: `0 <= temperature < 1e-6` means greedy: temperature then reads 1.0 and top_k 1
    (SGLang's normalisation); top_k -1 reads TOP_K_ALL. A negative temperature is kept
    as given, so that `validate` can reject it.
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    n: int = 1
    ignore_eos: bool = False
    stop: tuple[str, ...] | None = None
    stop_token_ids: frozenset[int] | None = None
    logit_bias: Mapping[int, float] | None = None
    sampling_seed: int | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is None and f.default is not None:
                self._set(f.name, f.default)
        if 0 <= self.temperature < GREEDY_TEMPERATURE_EPS:
            self._set("temperature", 1.0)
            self._set("top_k", 1)
        if self.top_k == -1:
            self._set("top_k", TOP_K_ALL)
        if isinstance(self.stop, str):
            self._set("stop", (self.stop,))
        elif self.stop is not None:
            self._set("stop", tuple(self.stop) or None)
        if self.stop_token_ids is not None:
            self._set("stop_token_ids", frozenset(map(_plain_int, self.stop_token_ids)) or None)
        if self.logit_bias is not None:
            self._set("logit_bias", {_plain_int(k): v for k, v in self.logit_bias.items()})

    def _set(self, name: str, value: Any) -> None:
        # NOTE: normalisation at construction only; the object is immutable afterwards.
        object.__setattr__(self, name, value)

    @property
    def is_greedy(self) -> bool:
        return self.top_k == 1

    def validate(self, vocab_size: int, prompt_len: int | None = None) -> None:
        """Raise `InvalidRequestError` for the first parameter out of range (§2.2 order).
        With `prompt_len`, `logprob_start_len` must also lie within the prompt."""
        for check in _CHECKS:
            check(self, vocab_size, prompt_len)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (normalised); `from_dict` rebuilds an equal object."""
        d = dataclasses.asdict(self)
        d["stop"] = list(self.stop) if self.stop else None
        d["stop_token_ids"] = sorted(self.stop_token_ids) if self.stop_token_ids else None
        if self.logit_bias is not None:
            d["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SamplingParams:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InvalidRequestError("sampling_params", sorted(unknown), "unknown parameter(s)")
        return cls(**d)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _plain_int(x: Any) -> Any:
    """numpy ints and JSON's string keys read as ints; anything else is kept for validate."""
    if isinstance(x, np.integer) or (isinstance(x, str) and x.lstrip("-").isdigit()):
        return int(x)
    return x


# NOTE: each check raises on its first failure; reasons are formatted only then (validation
# runs for every request the scheduler admits).


def _check_unsupported(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not (_is_int(p.n) and p.n == 1):
        raise InvalidRequestError("n", p.n, "n > 1 (parallel sampling) is not supported")
    for name in UNSUPPORTED_GRAMMARS:
        value = getattr(p, name)
        if value is not None:
            raise InvalidRequestError(name, value, "constrained decoding is not supported")


def _check_temperature_and_truncation(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not p.temperature >= 0:
        raise InvalidRequestError("temperature", p.temperature, "must be non-negative")
    if not 0 < p.top_p <= 1:
        raise InvalidRequestError("top_p", p.top_p, "must be in (0, 1]")
    if not 0 <= p.min_p <= 1:
        raise InvalidRequestError("min_p", p.min_p, "must be in [0, 1]")
    if not (_is_int(p.top_k) and p.top_k >= 1):
        raise InvalidRequestError("top_k", p.top_k, "must be -1 (disable) or at least 1")


def _check_penalties(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(p, name)
        if not -2 <= value <= 2:
            raise InvalidRequestError(name, value, "must be in [-2, 2]")
    if not 0 <= p.repetition_penalty <= 2:
        raise InvalidRequestError("repetition_penalty", p.repetition_penalty, "must be in [0, 2]")


def _check_lengths(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not (_is_int(p.max_new_tokens) and p.max_new_tokens >= 1):
        raise InvalidRequestError("max_new_tokens", p.max_new_tokens, "must be an integer >= 1")
    if not (_is_int(p.min_new_tokens) and 0 <= p.min_new_tokens <= p.max_new_tokens):
        raise InvalidRequestError("min_new_tokens", p.min_new_tokens,
                                  f"must be in [0, max_new_tokens={p.max_new_tokens}]")


def _check_token_ids(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    for name, ids in (("logit_bias", p.logit_bias), ("stop_token_ids", p.stop_token_ids)):
        bad = [t for t in ids if not _is_int(t) or not 0 <= t < vocab_size] if ids else ()
        if bad:
            raise InvalidRequestError(name, bad[0], f"token ids must be in [0, {vocab_size - 1}]")
    if not (p.stop is None or all(isinstance(s, str) and s for s in p.stop)):
        raise InvalidRequestError("stop", p.stop, "stop strings must be non-empty strings")


def _check_logprobs_and_seed(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not (_is_int(p.logprob_start_len) and p.logprob_start_len >= -1
            and (prompt_len is None or p.logprob_start_len <= prompt_len)):
        limit = "a prompt position" if prompt_len is None else f"in [-1, {prompt_len}] (the prompt length)"
        raise InvalidRequestError("logprob_start_len", p.logprob_start_len, f"must be -1 (none) or {limit}")
    if not (_is_int(p.top_logprobs_num) and p.top_logprobs_num >= 0):
        raise InvalidRequestError("top_logprobs_num", p.top_logprobs_num, "must be >= 0")
    if not (p.sampling_seed is None or _is_int(p.sampling_seed)):
        raise InvalidRequestError("sampling_seed", p.sampling_seed, "must be an integer or None")


_CHECKS = (
    _check_temperature_and_truncation,
    _check_penalties,
    _check_lengths,
    _check_token_ids,
    _check_logprobs_and_seed,
    _check_unsupported,
)
