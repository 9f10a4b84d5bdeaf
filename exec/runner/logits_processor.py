"""The logits processor (semantics §10): prune hidden rows with the spec's
`select_logit_rows` before the LM head, then next-token logits and input logprobs."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from shared.batch.forward_batch import ForwardBatch


class LogitsOutput(NamedTuple):
    next_token_logits: torch.Tensor               # [B, V] float32
    input_token_logprobs: torch.Tensor | None     # [L] float32, one per input-logprob row
    input_top_logprobs: list[tuple[list[int], list[float]]] | None  # per input-logprob row


def process_logits(compute_logits, hidden: torch.Tensor, fb: ForwardBatch) -> LogitsOutput:
    """hidden: [T, H] final-norm states. `compute_logits` maps [R, H] -> [R, V] float32."""
    rows, dev = fb.logit_rows, hidden.device
    logits = compute_logits(_select(hidden, rows.pruned_rows))            # [R, V]
    next_logits = _select(logits, rows.sample_indices)                    # [B, V]
    if len(rows.input_logprob_indices) == 0:
        return LogitsOutput(next_logits, None, None)
    lp = torch.log_softmax(logits[_t(rows.input_logprob_indices, dev)], dim=-1)  # [L, V]
    ids = _t(fb.extend_input_logprob_token_ids, dev)                      # [L]
    token_lp = lp.gather(1, ids[:, None]).squeeze(1)                      # [L]
    return LogitsOutput(next_logits, token_lp, _top_logprobs(lp, fb))


def _top_logprobs(lp: torch.Tensor, fb: ForwardBatch) -> list[tuple[list[int], list[float]]] | None:
    """Top-k per input-logprob row, k being the row's request's top_logprobs_num."""
    nums = np.asarray(fb.top_logprobs_nums, dtype=np.int64)
    if not nums.any():
        return None
    per_req = fb.extend_seq_lens - fb.extend_logprob_start_lens          # [B] rows per request
    k_row = np.repeat(nums, per_req)                                      # [L]
    vals, idx = lp.topk(int(k_row.max()), dim=-1)                         # [L, kmax]
    vals, idx = vals.tolist(), idx.tolist()
    return [(idx[r][:k], vals[r][:k]) for r, k in enumerate(k_row.tolist())]


def _select(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """x[rows]. NOTE: LogitRows' indices are strictly increasing, so as many rows as x has
    are all of them, in order: x itself (a decode step, no [B, V] copy)."""
    return x if len(rows) == x.shape[0] else x[_t(rows, x.device)]


def _t(a: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)
