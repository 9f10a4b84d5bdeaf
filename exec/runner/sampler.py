"""The token sampler: next-token logits [B, V] to token ids, with SGLang's semantics (§11).

`sample` runs the whole path for one batch:

1. `adjust_logits` (exec/runner/penalties.py): penalties over generated tokens, min_new_tokens,
   logit_bias (§11.3);
2. greedy requests (`top_k == 1`) take the argmax of the adjusted logits;
3. every other request: `logits / temperature`, softmax, the pytorch-fallback joint filter
   (top-k, top-p on the cumulative sum taken before masking, min-p relative to the max
   probability), then a seeded inverse-CDF draw over the tokens that survive.

Sampling is always seeded and never touches a global RNG: request i draws one uniform
u = hash(seeds[i], positions[i]) (an integer hash computed with int64 ops on
`logits.device`) and takes the first token whose cumulative kept probability exceeds u times
the kept total. Each row's cumulative sum is its own, so a request gets the same token
whatever else is in its batch and in whatever order. `positions[i]` must be the position of the last token fed for request i
(`seq_lens - 1`, as SGLang's ModelRunner passes it), so successive steps of one request draw
different noise. Requests without a `sampling_seed` get seed 42 from the ForwardBatch, so
unseeded runs are reproducible too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from exec.runner.penalties import adjust_logits
from shared.request.sampling_params import SamplingParams

MASK32 = (1 << 32) - 1
MURMUR_C1 = 0x85EBCA6B
MURMUR_C2 = 0xC2B2AE35
SEED_HI_SALT = 0x9E3779B9
POSITION_SALT = 0x7F4A7C15

TopLogprobs = tuple[tuple[int, float], ...]


class SampleResult(NamedTuple):
    """One sampling step's output for a batch of B requests.

    next_token_ids:      [B] int64, on the logits' device.
    next_token_logprobs: [B] float32: log softmax(adjusted logits / T) of the chosen token,
                         before top-k/top-p/min-p truncation (T = 1 for greedy requests),
                         clamped to finfo(float32).min.
    top_logprobs:        per request, the `top_logprobs_num` most likely (token_id, logprob)
                         pairs from the same distribution, most likely first; empty unless
                         the request has `return_logprob` and `top_logprobs_num > 0`.
    """

    next_token_ids: torch.Tensor
    next_token_logprobs: torch.Tensor
    top_logprobs: tuple[TopLogprobs, ...]


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    seeds: torch.Tensor | np.ndarray,
    positions: torch.Tensor | np.ndarray,
    eos_token_ids: Sequence[int],
) -> SampleResult:
    """Sample one token per row of `logits` [B, V] (float32); see the module docstring.

    `output_ids[i]` holds request i's generated tokens so far (never its prompt); `seeds` and
    `positions` are [B] int64. The input tensor is not modified.
    """
    device = logits.device
    logits = adjust_logits(logits, params, output_ids, eos_token_ids)  # [B, V]
    greedy = torch.tensor([p.is_greedy for p in params], dtype=torch.bool, device=device)  # [B]
    temps = torch.tensor([1.0 if p.is_greedy else p.temperature for p in params],
                         dtype=torch.float32, device=device)[:, None]  # [B, 1]
    scaled = logits / temps  # [B, V]
    logprobs = torch.log_softmax(scaled, dim=-1)  # [B, V], may hold -inf
    ids = torch.argmax(logits, dim=-1)  # [B] int64
    if not all(p.is_greedy for p in params):
        keep = (joint_filter(torch.softmax(scaled, dim=-1), params)
                if _needs_filter(params, logits.shape[1]) else None)  # [B, V] or None: all
        u = hash_uniform(_as_i64(seeds, device), _as_i64(positions, device), 1)[:, 0]  # [B]
        drawn = inverse_cdf_draw(logprobs, keep, u)  # [B]
        ids = torch.where(greedy, ids, drawn)
    logprobs = logprobs.clamp(min=torch.finfo(torch.float32).min)
    chosen = logprobs.gather(1, ids[:, None])[:, 0]  # [B]
    return SampleResult(ids, chosen, top_logprobs(logprobs, params))


def joint_filter(probs: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Which tokens survive top-k, top-p and min-p, in vocabulary order: [B, V] bool.

    SGLang's pytorch fallback: sort descending; drop rank j >= top_k; drop where the
    cumulative probability BEFORE j (computed on the unmasked sorted probs) exceeds top_p,
    so the first token always survives (top_p = 1 keeps everything); drop p < p_max * min_p.
    Ties sort by token id.
    """
    device = probs.device
    top_k = torch.tensor([p.top_k for p in params], dtype=torch.int64, device=device)[:, None]
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)[:, None]
    min_p = torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device)[:, None]
    p_sorted, order = probs.sort(dim=-1, descending=True, stable=True)  # [B, V] each
    rank = torch.arange(probs.shape[1], device=device)[None, :]  # [1, V]
    cum_before = p_sorted.cumsum(dim=-1) - p_sorted  # [B, V]
    # NOTE: top_p == 1 is off outright: a float32 cumsum can pass 1.0 and would otherwise drop
    # the tail of a top_p=1 request only when another request in the batch needs filtering.
    over_p = (cum_before > top_p) & (top_p < 1)
    drop = (rank >= top_k) | over_p | (p_sorted < p_sorted[:, :1] * min_p)
    return torch.empty_like(drop).scatter_(1, order, ~drop)


def inverse_cdf_draw(logprobs: torch.Tensor, keep: torch.Tensor | None, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from the kept tokens' renormalised distribution: the first token whose
    cumulative probability exceeds u * total [B]. logprobs [B, V], keep [B, V] bool (None:
    all), u [B] in (0, 1). Dropped and zero-probability tokens have empty intervals."""
    probs = logprobs.exp()                                              # [B, V] float32
    if keep is not None:
        probs = probs.masked_fill(~keep, 0.0)
    cdf = probs.cumsum(dim=-1)                                          # [B, V]
    target = (u.to(cdf.dtype) * cdf[:, -1])[:, None]                    # [B, 1]
    ids = torch.searchsorted(cdf, target, right=True)[:, 0].clamp(max=probs.shape[1] - 1)  # [B]
    empty = probs.gather(1, ids[:, None])[:, 0] == 0                    # [B]
    if bool(empty.any()):  # NOTE: rounding put target at the total: take the last token with mass
        last = probs.shape[1] - 1 - (probs > 0).flip(-1).to(torch.int8).argmax(dim=-1)
        ids = torch.where(empty, last, ids)
    return ids


def hash_uniform(seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """u[i, j] = (murmur3-fmix32 hash of (seed_i, position_i, j) + 0.5) / 2^32, float64 [B, V].

    NOTE: strictly inside (0, 1) (from 2^-33 to 1 - 2^-33).
    """
    seed_lo, seed_hi = seeds & MASK32, (seeds >> 32) & MASK32  # [B] each, in [0, 2^32)
    key = fmix32(fmix32(seed_lo) ^ seed_hi ^ SEED_HI_SALT)  # [B]
    key = fmix32(key ^ (positions & MASK32) ^ POSITION_SALT)  # [B]
    token = fmix32(torch.arange(vocab_size, dtype=torch.int64, device=seeds.device))  # [V]
    h = fmix32(key[:, None] ^ token[None, :])  # [B, V] in [0, 2^32)
    return (h.to(torch.float64) + 0.5) / float(1 << 32)


def fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding values in [0, 2^32)."""
    h = h ^ (h >> 16)
    h = _mul32(h, MURMUR_C1)
    h = h ^ (h >> 13)
    h = _mul32(h, MURMUR_C2)
    return h ^ (h >> 16)


def _mul32(h: torch.Tensor, c: int) -> torch.Tensor:
    """(h * c) mod 2^32 for h in [0, 2^32) and a 32-bit c, in 16-bit halves so that no int64
    product overflows (results are identical on every device)."""
    low = h * (c & 0xFFFF)  # < 2^48
    high = ((h * (c >> 16)) & 0xFFFF) << 16  # < 2^32
    return (low + high) & MASK32


def top_logprobs(logprobs: torch.Tensor, params: Sequence[SamplingParams]) -> tuple[TopLogprobs, ...]:
    """The top `top_logprobs_num` (token_id, logprob) pairs per request that asked for them."""
    nums = [p.top_logprobs_num if p.return_logprob else 0 for p in params]
    k = min(max(nums, default=0), logprobs.shape[1])
    if k == 0:
        return tuple(() for _ in params)
    values, indices = logprobs.topk(k, dim=-1)  # [B, k] each
    values, indices = values.tolist(), indices.tolist()
    return tuple(tuple(zip(indices[i][:n], values[i][:n], strict=True)) for i, n in enumerate(nums))


def _needs_filter(params: Sequence[SamplingParams], vocab_size: int) -> bool:
    """Whether any sampled (non-greedy) request truncates its distribution at all."""
    return any(not p.is_greedy and (p.top_k < vocab_size or p.top_p < 1 or p.min_p > 0)
               for p in params)


def _as_i64(values: torch.Tensor | np.ndarray, device: torch.device) -> torch.Tensor:
    """A [B] int64 tensor on `device` from a numpy array or tensor."""
    return torch.as_tensor(values, dtype=torch.int64, device=device).reshape(-1)
