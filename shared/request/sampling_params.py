"""Per-request sampling parameters, with SGLang's defaults and normalisation (semantics §2.2).

Construction normalises; `validate(vocab_size)` checks types and ranges and raises
`InvalidRequestError` naming the offending field. Construction never rejects: a request
is refused by validation, before anything is allocated for it.

Types are strict: flags are bools (np.bool_ reads as bool), integer fields are ints (numpy
ints too; never bools, floats or strings), real fields are real numbers (never bools or
strings). Bounds beyond SGLang's `verify`, chosen so that nothing validated can fail in a step:
- `logit_bias` values: finite, in [-LOGIT_BIAS_LIMIT, LOGIT_BIAS_LIMIT] = [-100, 100], the
  OpenAI API's range (SGLang's `verify` checks only the keys; a bias of 1e308 overflows the
  float32 logits to inf, and inf / NaN poison the softmax);
- `sampling_seed`: in [SEED_MIN, SEED_MAX], int64, the dtype seeds are batched in
  (`ScheduleBatch.sampling_seeds`); the sampler's hash takes negative int64 seeds too;
- `top_k` above TOP_K_ALL reads TOP_K_ALL at construction: every top_k at least the
  vocabulary keeps all tokens, so no draw changes, and top_k stays within int32 (SGLang's
  sampling batch holds top_k as int32);
- `top_logprobs_num`: at most the vocabulary size;
- `temperature`: finite (SGLang's `verify` refuses inf and NaN too).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.request.invalid_request import InvalidRequestError

TOP_K_ALL = 1 << 30
LOGIT_BIAS_LIMIT = 100.0
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1
BOOL_FIELDS = ("ignore_eos", "return_logprob")
GREEDY_TEMPERATURE_EPS = 1e-6
UNSUPPORTED_GRAMMARS = ("regex", "json_schema", "ebnf")


@dataclass(frozen=True)
class SamplingParams:
    """What to generate and how to sample it. `None` for a parameter means its default.

    NOTE: `0 <= temperature < 1e-6` means greedy: temperature then reads 1.0 and top_k 1
    (SGLang's normalisation); top_k -1 (or above TOP_K_ALL) reads TOP_K_ALL. A negative
    temperature, or a value of the wrong type, is kept as given, so that `validate` can
    reject it.
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
        for name, default in _NON_NONE_DEFAULTS:
            if getattr(self, name) is None:
                self._set(name, default)
        for name in BOOL_FIELDS:
            if isinstance(getattr(self, name), np.bool_):
                self._set(name, bool(getattr(self, name)))
        if _is_real(self.temperature) and 0 <= self.temperature < GREEDY_TEMPERATURE_EPS:
            self._set("temperature", 1.0)
            self._set("top_k", 1)
        if _is_int(self.top_k) and (self.top_k == -1 or self.top_k > TOP_K_ALL):
            self._set("top_k", TOP_K_ALL)
        # NOTE: the three below default to None, which none of their normalisations changes
        if self.stop is not None:
            self._normalise_stop()
        if self.stop_token_ids is not None and _is_collection(self.stop_token_ids):
            self._set("stop_token_ids", _id_set(self.stop_token_ids))
        if self.logit_bias is not None and isinstance(self.logit_bias, Mapping):
            self._set("logit_bias", {_plain_int(k): v for k, v in self.logit_bias.items()})

    def _normalise_stop(self) -> None:
        if isinstance(self.stop, str):
            self._set("stop", (self.stop,))
        elif _is_collection(self.stop):
            self._set("stop", tuple(self.stop) or None)

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
        if not isinstance(d, Mapping):
            raise InvalidRequestError("sampling_params", d, "must be a mapping of parameter names to values")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InvalidRequestError("sampling_params", sorted(unknown, key=str), "unknown parameter(s)")
        return cls(**d)


# NOTE: the fields whose default is not None: a None given for one reads its default
_NON_NONE_DEFAULTS = tuple((f.name, f.default) for f in dataclasses.fields(SamplingParams)
                           if f.default is not None)


def is_int_type(t: type) -> bool:
    """Python's or numpy's int type, never a bool."""
    # NOTE: `t is int` first: the common case, without the subclass checks
    return t is int or (issubclass(t, (int, np.integer)) and not issubclass(t, (bool, np.bool_)))


def _is_int(x: Any) -> bool:
    return is_int_type(type(x))


def _is_real(x: Any) -> bool:
    """A real number (int or float, Python's or numpy's), never a bool or a string."""
    t = type(x)
    return t is float or t is int or (isinstance(x, (int, float, np.integer, np.floating))
                                       and not isinstance(x, (bool, np.bool_)))


def _is_collection(x: Any) -> bool:
    """An iterable of items other than text (None, numbers and text are left to validate)."""
    return isinstance(x, Iterable) and not isinstance(x, (str, bytes, bytearray, Mapping))


def _id_set(ids: Iterable[Any]) -> frozenset | tuple | None:
    """stop_token_ids as a frozenset (None when empty); unhashable items are kept as a tuple
    for validate to refuse."""
    try:
        return frozenset(map(_plain_int, ids)) or None
    except TypeError:
        return tuple(ids)


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
    if not (_is_real(p.temperature) and 0 <= p.temperature < math.inf):
        raise InvalidRequestError("temperature", p.temperature, "must be a non-negative finite number")
    if not (_is_real(p.top_p) and 0 < p.top_p <= 1):
        raise InvalidRequestError("top_p", p.top_p, "must be a number in (0, 1]")
    if not (_is_real(p.min_p) and 0 <= p.min_p <= 1):
        raise InvalidRequestError("min_p", p.min_p, "must be a number in [0, 1]")
    if not (_is_int(p.top_k) and p.top_k >= 1):
        raise InvalidRequestError("top_k", p.top_k, "must be -1 (disable) or at least 1")


def _check_penalties(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(p, name)
        if not (_is_real(value) and -2 <= value <= 2):
            raise InvalidRequestError(name, value, "must be a number in [-2, 2]")
    if not (_is_real(p.repetition_penalty) and 0 <= p.repetition_penalty <= 2):
        raise InvalidRequestError("repetition_penalty", p.repetition_penalty, "must be a number in [0, 2]")


def _check_lengths(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not (_is_int(p.max_new_tokens) and p.max_new_tokens >= 1):
        raise InvalidRequestError("max_new_tokens", p.max_new_tokens, "must be an integer >= 1")
    if not (_is_int(p.min_new_tokens) and 0 <= p.min_new_tokens <= p.max_new_tokens):
        raise InvalidRequestError("min_new_tokens", p.min_new_tokens,
                                  f"must be in [0, max_new_tokens={p.max_new_tokens}]")


def _check_token_ids(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not (p.logit_bias is None or isinstance(p.logit_bias, Mapping)):
        raise InvalidRequestError("logit_bias", p.logit_bias, "must be a mapping {token id: bias}")
    if not (p.stop_token_ids is None or isinstance(p.stop_token_ids, frozenset)):
        raise InvalidRequestError("stop_token_ids", p.stop_token_ids, "must be a list of token ids")
    for name, ids in (("logit_bias", p.logit_bias), ("stop_token_ids", p.stop_token_ids)):
        bad = _first_bad_id(ids, vocab_size) if ids else None
        if bad is not None:
            raise InvalidRequestError(name, bad[0], f"token ids must be ints in [0, {vocab_size - 1}]")
    if p.logit_bias:
        _check_bias_values(p.logit_bias)
    if not (p.stop is None or (isinstance(p.stop, tuple) and all(isinstance(s, str) and s for s in p.stop))):
        raise InvalidRequestError("stop", p.stop, "stop strings must be non-empty strings")


def _first_bad_id(ids: Iterable[Any], vocab_size: int) -> tuple[Any] | None:
    """(the first id that is not an int in [0, vocab_size),) or None: one pass over the
    types, then min and max, so the loop runs only to name a bad id."""
    ids = list(ids)
    if all(map(is_int_type, set(map(type, ids)))) and min(ids) >= 0 and max(ids) < vocab_size:
        return None
    return next((t,) for t in ids if not (_is_int(t) and 0 <= t < vocab_size))


def _check_bias_values(bias: Mapping[int, Any]) -> None:
    """Every bias a real number in [-LOGIT_BIAS_LIMIT, LOGIT_BIAS_LIMIT] (NaN and inf are not)."""
    values = list(bias.values())
    ok = all(map(_is_real, values))
    if ok:
        try:
            arr = np.asarray(values, dtype=np.float64)
        except OverflowError:  # an int beyond float64
            ok = False
        else:
            ok = bool((np.abs(arr) <= LOGIT_BIAS_LIMIT).all())
    if not ok:
        token, value = next((t, v) for t, v in bias.items()
                            if not (_is_real(v) and -LOGIT_BIAS_LIMIT <= v <= LOGIT_BIAS_LIMIT))
        raise InvalidRequestError("logit_bias", {token: value},
                                  f"biases must be finite numbers in [-{LOGIT_BIAS_LIMIT:g}, {LOGIT_BIAS_LIMIT:g}]")


def _check_logprobs_and_seed(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    if not (_is_int(p.logprob_start_len) and p.logprob_start_len >= -1
            and (prompt_len is None or p.logprob_start_len <= prompt_len)):
        limit = "a prompt position" if prompt_len is None else f"in [-1, {prompt_len}] (the prompt length)"
        raise InvalidRequestError("logprob_start_len", p.logprob_start_len, f"must be -1 (none) or {limit}")
    if not (_is_int(p.top_logprobs_num) and 0 <= p.top_logprobs_num <= vocab_size):
        raise InvalidRequestError("top_logprobs_num", p.top_logprobs_num,
                                  f"must be an integer in [0, {vocab_size}] (the vocabulary size)")
    if not (p.sampling_seed is None or (_is_int(p.sampling_seed) and SEED_MIN <= p.sampling_seed <= SEED_MAX)):
        raise InvalidRequestError("sampling_seed", p.sampling_seed, "must be None or an int64 integer "
                                  "in [-2**63, 2**63 - 1]")


def _check_flags(p: SamplingParams, vocab_size: int, prompt_len: int | None) -> None:
    for name in BOOL_FIELDS:
        if not isinstance(getattr(p, name), bool):
            raise InvalidRequestError(name, getattr(p, name), "must be True or False")


_CHECKS = (
    _check_temperature_and_truncation,
    _check_penalties,
    _check_lengths,
    _check_token_ids,
    _check_logprobs_and_seed,
    _check_flags,
    _check_unsupported,
)
