"""Whole-request validation, run before anything is allocated (semantics §2.3).

Checked in this order: the prompt (not a flat sequence of ints, empty, token ids outside
the vocabulary, too long for the context), then the length budget (prompt + max_new_tokens against the context and
against the KV pool), then every sampling parameter. The first failure raises
`InvalidRequestError` with the field at fault. A request arriving with outputs already
produced is also checked for those (`validate_prebuilt_outputs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams, is_int_type

CLIP_MAX_NEW_TOKENS = 4096


def validate_request(
    input_ids: Sequence[int] | np.ndarray,
    sampling_params: SamplingParams,
    *,
    vocab_size: int,
    context_len: int,
    max_total_tokens: int | None = None,
    page_size: int = 1,
) -> None:
    """Raise `InvalidRequestError` if the request could never be served; return None if it can."""
    ids = token_array(input_ids)
    _check_prompt(ids, vocab_size, context_len)
    _check_length_budget(len(ids), sampling_params, context_len, max_total_tokens, page_size)
    sampling_params.validate(vocab_size, prompt_len=len(ids))


def validate_prebuilt_outputs(output_ids: Sequence[int], sampling_params: SamplingParams, *,
                              vocab_size: int, eos_token_ids: Sequence[int]) -> None:
    """Raise `InvalidRequestError` unless the outputs a request arrives with (produced
    elsewhere: `Scheduler.add_request`) leave it unfinished: ints in the vocabulary, fewer
    than max_new_tokens, the last neither an EOS nor a stop token (unless ignore_eos). The
    request itself is checked by `validate_request`."""
    try:
        ids = token_array(output_ids)
    except InvalidRequestError as e:
        raise InvalidRequestError("output_ids", e.value, e.reason) from None
    if ids.size and (np.minimum.reduce(ids) < 0 or np.maximum.reduce(ids) >= vocab_size):
        i = int(np.flatnonzero((ids < 0) | (ids >= vocab_size))[0])
        raise InvalidRequestError("output_ids", int(ids[i]),
                                  f"output token {i} is outside the vocabulary [0, {vocab_size})")
    p = sampling_params
    if ids.size >= p.max_new_tokens:
        raise InvalidRequestError("output_ids", list(output_ids),
                                  f"{ids.size} outputs already produced leave none of "
                                  f"max_new_tokens={p.max_new_tokens} to generate")
    last = int(ids[-1]) if ids.size else None
    if not p.ignore_eos and (last in eos_token_ids or last in (p.stop_token_ids or ())):
        raise InvalidRequestError("output_ids", list(output_ids),
                                  f"its last output {last} is an EOS or stop token: it has finished")


def token_array(input_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """The prompt as a flat integer array (its dtype kept), or `InvalidRequestError`: ints only
    (Python's or numpy's), never bools, floats, text, bytes or nested lists. A list costs one
    pass over its element types and one conversion, no Python loop per token."""
    if isinstance(input_ids, np.ndarray):
        ids = input_ids
    elif isinstance(input_ids, (str, bytes, bytearray, memoryview)) or not isinstance(input_ids, Sequence):
        raise InvalidRequestError("input_ids", input_ids,
                                  "must be a sequence of token ids (ints), not text, bytes or a scalar")
    else:
        ids = _int_list_array(input_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise InvalidRequestError("input_ids", input_ids, "must be a flat sequence of ints")
    return ids


def _int_list_array(input_ids: Sequence[int]) -> np.ndarray:
    """[P] int64 from a sequence whose items are all ints (one C-level pass over their types)."""
    if not all(map(is_int_type, set(map(type, input_ids)))):
        i, bad = next((i, t) for i, t in enumerate(input_ids) if not is_int_type(type(t)))
        raise InvalidRequestError("input_ids", bad, f"token at position {i} is a {type(bad).__name__}, "
                                  f"not an int")
    try:
        return np.asarray(input_ids, dtype=np.int64)
    except OverflowError:
        i, bad = next((i, t) for i, t in enumerate(input_ids) if not -(1 << 63) <= t < 1 << 63)
        raise InvalidRequestError("input_ids", bad, f"token at position {i} is outside the vocabulary "
                                  f"(beyond int64)") from None


def _check_prompt(ids: np.ndarray, vocab_size: int, context_len: int) -> None:
    if ids.size == 0:
        raise InvalidRequestError("input_ids", [], "the prompt is empty (at least one token needed)")
    if np.minimum.reduce(ids) < 0 or np.maximum.reduce(ids) >= vocab_size:
        i = int(np.flatnonzero((ids < 0) | (ids >= vocab_size))[0])
        raise InvalidRequestError("input_ids", int(ids[i]),
                                  f"token at position {i} is outside the vocabulary [0, {vocab_size})")
    if ids.size >= context_len:
        raise InvalidRequestError("input_ids", int(ids.size),
                                  f"prompt length must be below the context length ({context_len})")


def _check_length_budget(
    n: int, p: SamplingParams, context_len: int, max_total_tokens: int | None, page_size: int
) -> None:
    max_new = p.max_new_tokens
    if not isinstance(max_new, (int, np.integer)) or isinstance(max_new, bool):
        raise InvalidRequestError("max_new_tokens", max_new, "must be an integer >= 1")
    # NOTE: `>=`, as SGLang's TokenizerManager._validate_one_request in the snapshot the spec
    # follows (semantics §2.3): a request may not fill the context to its last position.
    if n + max_new >= context_len:
        raise InvalidRequestError(
            "max_new_tokens", max_new,
            f"Requested token count exceeds the model's maximum context length of {context_len} "
            f"tokens: {n} prompt tokens + {max_new} new tokens = {n + max_new} must be below it")
    if max_total_tokens is not None and n + min(max_new, CLIP_MAX_NEW_TOKENS) + page_size >= max_total_tokens:
        raise InvalidRequestError(
            "max_new_tokens", max_new,
            f"prompt ({n}) + min(max_new_tokens, {CLIP_MAX_NEW_TOKENS}) + page_size ({page_size}) "
            f"does not fit the KV pool ({max_total_tokens} tokens), even alone")
