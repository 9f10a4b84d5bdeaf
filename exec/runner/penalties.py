"""Logit adjustments before sampling (semantics §11.3): penalties, min_new_tokens, logit_bias.

`adjust_logits` applies, in this order:
1. additive penalties over the request's GENERATED tokens (never the prompt):
   frequency `logits -= f * count[v]`, presence `logits -= p * seen[v]`;
2. the multiplicative repetition penalty on seen tokens:
   `logits / r` where `logits > 0`, else `logits * r`;
3. min_new_tokens: while `len(output_ids) < min_new_tokens`, the EOS ids and the request's
   `stop_token_ids` read -inf (this includes the first token, sampled at prefill);
4. `logit_bias` is added.

All steps are vectorised over the batch; the per-request Python loops only gather token ids
into flat index tensors. Steps whose parameters are all neutral are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shared.request.sampling_params import SamplingParams


def adjust_logits(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    eos_token_ids: Sequence[int],
) -> torch.Tensor:
    """Return adjusted float32 logits [B, V]; the input tensor is never modified."""
    logits = logits.to(torch.float32)  # [B, V]
    logits = apply_penalties(logits, params, output_ids)
    logits = mask_stop_tokens(logits, params, output_ids, eos_token_ids)
    return add_logit_bias(logits, params)


MIN_REPETITION_SCALE = 1e-6


def apply_penalties(
    logits: torch.Tensor, params: Sequence[SamplingParams], output_ids: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Frequency and presence (additive), then repetition (multiplicative), over generated tokens."""
    freq = [p.frequency_penalty for p in params]
    pres = [p.presence_penalty for p in params]
    rep = [p.repetition_penalty for p in params]
    if not any(freq) and not any(pres) and all(r == 1 for r in rep):
        return logits
    counts = token_counts(output_ids, logits.shape[1], logits.device)  # [B, V] float32
    seen = counts > 0                                                   # [B, V]
    column = _column(logits.device)
    logits = logits - column(freq) * counts - column(pres) * seen
    # NOTE: repetition_penalty may be 0 (the accepted range is [0, 2]); a floor keeps seen
    # positive logits finite (x / 0 would be inf, and softmax of inf is NaN).
    scale = torch.where(seen, column(rep).clamp(min=MIN_REPETITION_SCALE), 1.0)  # [B, V]
    return torch.where(logits > 0, logits / scale, logits * scale)


def mask_stop_tokens(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    output_ids: Sequence[Sequence[int]],
    eos_token_ids: Sequence[int],
) -> torch.Tensor:
    """Set EOS and stop_token_ids to -inf for requests with fewer than min_new_tokens outputs."""
    rows, cols = [], []
    for i, (p, out) in enumerate(zip(params, output_ids, strict=True)):
        if len(out) < p.min_new_tokens:
            stop = set(eos_token_ids) | set(p.stop_token_ids or ())
            rows += [i] * len(stop)
            cols += sorted(stop)
    if not rows:
        return logits
    index = _index(rows, cols, logits.device)
    return logits.index_put(index, torch.tensor(float("-inf"), device=logits.device))


def add_logit_bias(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Add each request's sparse `logit_bias` {token: bias} to its row."""
    rows, cols, values = [], [], []
    for i, p in enumerate(params):
        for token, bias in (p.logit_bias or {}).items():
            rows.append(i)
            cols.append(token)
            values.append(float(bias))
    if not rows:
        return logits
    index = _index(rows, cols, logits.device)
    bias = torch.tensor(values, dtype=torch.float32, device=logits.device)  # [N]
    return logits.index_put(index, bias, accumulate=True)


def token_counts(output_ids: Sequence[Sequence[int]], vocab_size: int, device: torch.device) -> torch.Tensor:
    """How often each token occurs in each request's generated tokens: [B, V] float32."""
    rows = [i for i, out in enumerate(output_ids) for _ in out]
    cols = [int(t) for out in output_ids for t in out]
    counts = torch.zeros(len(output_ids), vocab_size, dtype=torch.float32, device=device)
    if not rows:
        return counts
    ones = torch.ones(len(rows), dtype=torch.float32, device=device)  # [N]
    return counts.index_put(_index(rows, cols, device), ones, accumulate=True)


def _index(rows: list[int], cols: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) int64 index tensors for `index_put`."""
    return (torch.tensor(rows, dtype=torch.int64, device=device),
            torch.tensor(cols, dtype=torch.int64, device=device))


def _column(device: torch.device):
    """A function turning one value per request into a [B, 1] float32 column on `device`."""
    return lambda values: torch.tensor(values, dtype=torch.float32, device=device)[:, None]
