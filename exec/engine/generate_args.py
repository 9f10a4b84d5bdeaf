"""How `Engine.generate` reads its arguments: one prompt or a list of them, and the
sampling parameters (None, one SamplingParams or dict for every prompt, or one per prompt),
refusing anything else with an InvalidRequestError naming `sampling_params`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams


def is_single_prompt(prompts: Any, chat: bool) -> bool:
    """One prompt (text, token ids, or anything that is no list of prompts, left for
    `Engine.make_requests` to refuse naming prompt 0) or a list of them."""
    if isinstance(prompts, (str, bytes, bytearray)) or (isinstance(prompts, np.ndarray) and prompts.ndim == 1):
        return True
    if not isinstance(prompts, (Sequence, np.ndarray)):
        return True
    first = prompts[0] if len(prompts) else None
    return isinstance(first, (int, np.integer)) or (chat and isinstance(first, dict))


def params_per_prompt(sampling_params: Any, n: int) -> list[SamplingParams]:
    if sampling_params is None or isinstance(sampling_params, (SamplingParams, Mapping)):
        return [_as_params(sampling_params)] * n
    if not isinstance(sampling_params, Iterable) or isinstance(sampling_params, (str, bytes)):
        raise InvalidRequestError("sampling_params", sampling_params,
                                  "must be None, a SamplingParams, a dict, or a list of them (one per prompt)")
    params = list(sampling_params)
    if len(params) != n:
        raise InvalidRequestError("sampling_params", len(params),
                                  f"{len(params)} sampling params for {n} prompts")
    return [_as_params(p, i) for i, p in enumerate(params)]


def _as_params(p: Any, i: int = 0) -> SamplingParams:
    if p is None:
        return SamplingParams()
    if isinstance(p, SamplingParams):
        return p
    if not isinstance(p, Mapping):
        raise InvalidRequestError("sampling_params", p,
                                  f"prompt {i}: must be None, a SamplingParams or a dict")
    return SamplingParams.from_dict(p)
