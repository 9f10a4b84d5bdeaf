"""`ForwardBatch`: what a ModelRunner needs for one forward, as numpy arrays (§8.2–§8.3).

Built by `ForwardBatch.init_new(schedule_batch)`, which reads the ScheduleBatch and never
changes it. Token arrays are [T] (T = extend_num_tokens, or B for decode); per-request
arrays are [B]. The four extend arrays are empty for DECODE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shared.batch.forward_mode import ForwardMode
from shared.batch.logit_rows import LogitRows, decode_logit_rows, select_logit_rows
from shared.request.sampling_params import SamplingParams

if TYPE_CHECKING:
    from shared.batch.schedule_batch import ScheduleBatch


@dataclass(frozen=True, eq=False)
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: np.ndarray                  # [T] int64
    req_pool_indices: np.ndarray           # [B] int64 rows of req_to_token
    seq_lens: np.ndarray                   # [B] int64, this forward's tokens included
    out_cache_loc: np.ndarray              # [T] int64 KV slot each token writes
    positions: np.ndarray                  # [T] int64
    extend_num_tokens: int
    extend_prefix_lens: np.ndarray         # [B] int64 (extend) / empty (decode)
    extend_seq_lens: np.ndarray            # [B] int64 (extend) / empty (decode)
    extend_start_loc: np.ndarray           # [B] int64 (extend) / empty (decode)
    extend_logprob_start_lens: np.ndarray  # [B] int64 (extend) / empty (decode)
    req_to_token: np.ndarray               # [rows, max_context + 4] int32, read-only view
    logit_rows: LogitRows                  # the rows that become logits (select_logit_rows)
    rids: tuple[str, ...]
    sampling_params: tuple[SamplingParams, ...]
    sampling_seeds: np.ndarray             # [B] int64 (sampling_seed, or 42)
    output_ids: tuple[list[int], ...]      # per request, generated tokens so far (read-only)
    return_logprob: bool
    extend_input_logprob_token_ids: np.ndarray | None  # [L] int64, the token each logprob row predicts
    top_logprobs_nums: tuple[int, ...]
    vocab_size: int

    @property
    def seq_lens_sum(self) -> int:
        return int(self.seq_lens.sum())

    @classmethod
    def init_new(cls, batch: ScheduleBatch) -> ForwardBatch:
        mode = batch.forward_mode
        pos = batch.positions()
        extend = mode.is_extend()
        empty = np.zeros(0, np.int64)
        table = batch.mem.req_to_token_pool.read_only_view
        info = batch.per_request_info()
        return cls(
            forward_mode=mode, batch_size=len(batch.reqs), input_ids=batch.input_ids,
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens,
            out_cache_loc=batch.out_cache_loc, positions=pos.positions,
            extend_num_tokens=len(batch.input_ids),
            extend_prefix_lens=batch.prefix_lens if extend else empty,
            extend_seq_lens=batch.extend_lens if extend else empty,
            extend_start_loc=pos.extend_start_loc if extend else empty,
            extend_logprob_start_lens=batch.extend_logprob_start_lens if extend else empty,
            req_to_token=table, logit_rows=_logit_rows(batch), rids=info.rids,
            sampling_params=info.sampling_params, sampling_seeds=info.sampling_seeds,
            output_ids=info.output_ids, return_logprob=info.return_logprob,
            extend_input_logprob_token_ids=batch.extend_input_logprob_token_ids,
            top_logprobs_nums=info.top_logprobs_nums, vocab_size=batch.vocab_size)


def _logit_rows(batch: ScheduleBatch) -> LogitRows:
    if batch.forward_mode.is_decode():
        return decode_logit_rows(len(batch.reqs))
    starts = batch.extend_logprob_start_lens
    needs_input_logprobs = batch.return_logprob and bool(np.any(starts < batch.extend_lens))
    return select_logit_rows(batch.extend_lens, starts if needs_input_logprobs else None)
