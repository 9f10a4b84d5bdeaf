"""What every workload generator draws with: the checked seeded generator (`workload_rng`),
token ids uniform in [0, vocab_size) (`tokens`, `token_lists`), a request's sampling
parameters (`request_params`) and the generator's `config` record (`generator_config`).

Unless a `sampling_params` template is given, each request asks for
`SamplingParams(max_new_tokens=output_len, ignore_eos=True)`; with one,
`dataclasses.replace(template, max_new_tokens=output_len)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from shared.request.sampling_params import SamplingParams
from shared.workload.arrivals import check_arrivals


def check_count(n: int) -> None:
    """ValueError unless a generator's request count is >= 0."""
    if n < 0:
        raise ValueError(f"number of requests must be >= 0, got {n}")


def workload_rng(seed: int, vocab_size: int, rate: float,
                 burstiness: float) -> np.random.Generator:
    """Check the build parameters every generator shares, then the one generator it draws from."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer (a workload is reproducible), got {seed!r}")
    check_arrivals(rate, burstiness)
    return np.random.default_rng(seed)


def tokens(rng: np.random.Generator, n: int, vocab_size: int) -> tuple[int, ...]:
    return tuple(rng.integers(0, vocab_size, size=n).tolist())


def token_lists(rng: np.random.Generator, lengths: np.ndarray,
                vocab_size: int) -> list[tuple[int, ...]]:
    """One draw for all prompts, cut into `lengths` pieces."""
    flat = rng.integers(0, vocab_size, size=int(lengths.sum())).tolist()
    ends = np.cumsum(lengths).tolist()
    return [tuple(flat[e - n:e]) for n, e in zip(lengths.tolist(), ends, strict=True)]


def request_params(template: SamplingParams | None, max_new_tokens: int) -> SamplingParams:
    if template is None:
        return SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    return dataclasses.replace(template, max_new_tokens=max_new_tokens)


def generator_config(generator: str, seed: int, vocab_size: int, rate: float,
                     burstiness: float, template: SamplingParams | None,
                     **params: Any) -> dict[str, Any]:
    """The `Workload.config` of a generated workload: its generator, the build parameters and
    the traffic's shape, in this key order (it is written into config files and digests)."""
    return {"generator": generator, "seed": seed, "vocab_size": vocab_size,
            "rate": float(rate), "burstiness": float(burstiness), **params,
            "sampling_params": template.to_dict() if template is not None else None}
