"""`PrefillAdder`: which waiting requests fit into the next prefill (semantics §5.2).

Budgets, with A = free KV tokens and E = evictable cached tokens, both read fresh:

    rem_total_tokens = A + E - (decode growth reserved for running and admitted requests)
    cur_rem_tokens   = A + E - (what this prefill takes now)
    rem_input_tokens = max_prefill_tokens - (tokens admitted so far)
    rem_chunk_tokens = chunked_prefill_size - (tokens admitted so far)

Mixed chunking pre-charges every budget with the running batch size M (one decode token
each). A running request reserves min(max_new - outputs, 4096) * new_token_ratio tokens.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from shared.chunk_cache import ChunkCache
from shared.kv_memory import KVMemory
from shared.req import Req
from shared.validation import CLIP_MAX_NEW_TOKENS

IGNORE_EOS_RESERVE_TOKENS = 1


class AddReqResult(Enum):
    CONTINUE = 1  # the next request may fit too
    NO_TOKEN = 2  # out of KV budget: the running batch is full
    OTHER = 3     # out of prefill or chunk budget for this round


class PrefillAdder:
    def __init__(self, mem: KVMemory, running_reqs: list[Req], new_token_ratio: float,
                 max_prefill_tokens: int, chunk_size: int | None, mixed_decode_tokens: int = 0,
                 running_remaining: np.ndarray | None = None) -> None:
        """`running_remaining` ([R] int64), when given, is max_new_tokens - len(output_ids)
        of each running request (ScheduleBatch.remaining_new_tokens)."""
        self.mem = mem
        self.ps = mem.page_size
        self.running_reqs = running_reqs
        self.new_token_ratio = new_token_ratio
        m = mixed_decode_tokens
        self.rem_input_tokens = max_prefill_tokens - m
        self.rem_chunk_tokens = None if chunk_size is None else chunk_size - m
        if running_remaining is None:
            remaining = [min(r.sampling_params.max_new_tokens - len(r.output_ids), CLIP_MAX_NEW_TOKENS)
                         for r in running_reqs]
        else:
            remaining = np.minimum(running_remaining, CLIP_MAX_NEW_TOKENS).tolist()
        self.rem_total_token_offset = m + sum(map(new_token_ratio.__mul__, remaining))
        self.cur_rem_token_offset = m
        self.can_run_list: list[Req] = []
        self.new_chunked_req: Req | None = None

    @property
    def rem_total_tokens(self) -> float:
        return self.mem.available_plus_evictable() - self.rem_total_token_offset

    @property
    def cur_rem_tokens(self) -> float:
        return self.mem.available_plus_evictable() - self.cur_rem_token_offset

    def ceil_paged(self, n: int) -> int:
        return -(-n // self.ps) * self.ps

    def budget_state(self) -> AddReqResult:
        if self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0:
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (self.rem_chunk_tokens is not None
                                          and self.rem_chunk_tokens <= 0):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _update_prefill_budget(self, extend: int, max_new: int) -> None:
        self.rem_total_token_offset += extend + max_new + self.ps
        self.cur_rem_token_offset += extend + self.ps
        self.rem_input_tokens -= extend
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend

    def add_chunked_req(self, req: Req) -> Req | None:
        """Continue the chunked request with the next chunk. Returns it while more chunks
        remain, None after its last chunk.

        NOTE: SGLang always adds it; when the KV pool cannot hold even one more token of it
        right now (cur_rem_tokens - page_size <= 0), we skip it this round instead of running out of
        memory mid-prefill. It stays the chunked request, its KV locked in the cache."""
        rem = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
        if rem <= 0:
            rem = self.rem_chunk_tokens
        rem = min(rem, int(self.cur_rem_tokens) - self.ps)
        if rem <= 0:
            req.fill_ids = req.fill_ids[: len(req.prefix_indices)]  # only what is computed
            return req
        truncated = req.extend_input_len > rem
        req.set_extend_input_len(min(req.extend_input_len, rem))
        req.fill_ids = req.fill_ids[: len(req.prefix_indices) + req.extend_input_len]
        self.can_run_list.append(req)
        self._update_prefill_budget(
            req.extend_input_len, 0 if truncated else min(req.sampling_params.max_new_tokens, CLIP_MAX_NEW_TOKENS))
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """Admit `req` (after `init_next_round_input`) whole, or as the one chunked
        request, or say which budget ran out."""
        p = req.sampling_params
        if p.ignore_eos and isinstance(self.mem.tree_cache, ChunkCache):
            return self.add_one_req_ignore_eos(req)
        max_new = min(max(p.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)
        total = req.extend_input_len + max_new + self.ps
        if total >= self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        if self.ceil_paged(req.extend_input_len) >= self.rem_input_tokens and self.can_run_list:
            return AddReqResult.OTHER
        cache = self.mem.tree_cache
        cache.inc_lock_ref(req.last_node)  # so that budget checks cannot evict the prefix
        try:
            return self._admit_locked(req, total, min(p.max_new_tokens, CLIP_MAX_NEW_TOKENS))
        finally:
            cache.dec_lock_ref(req.last_node)

    def _admit_locked(self, req: Req, total: int, reserve: int) -> AddReqResult:
        if total >= self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        inp = self.ceil_paged(req.extend_input_len)
        if inp >= self.rem_input_tokens and self.can_run_list:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is None or inp <= self.rem_chunk_tokens:
            self._admit(req)
            self._update_prefill_budget(inp, reserve)
            return self.budget_state()
        trunc = self.rem_chunk_tokens // self.ps * self.ps
        if trunc <= 0:
            return AddReqResult.OTHER
        req.set_extend_input_len(trunc)
        req.fill_ids = req.fill_ids[: len(req.prefix_indices) + trunc]
        self._admit(req)
        self.new_chunked_req = req
        self._update_prefill_budget(trunc, 0)
        return self.budget_state()

    def add_one_req_ignore_eos(self, req: Req) -> AddReqResult:
        """Without a prefix cache, an ignore_eos request's future is known: simulate the
        running, admitted and new requests finishing shortest-remaining first, and admit
        only if free memory never drops below one token per request still running."""
        inp = self.ceil_paged(req.extend_input_len)
        if inp > min(self.cur_rem_tokens, self.rem_total_tokens):
            return AddReqResult.NO_TOKEN
        if inp >= self.rem_input_tokens and self.can_run_list:
            # NOTE: SGLang's ignore_eos path skips this max_prefill_tokens check; we keep
            # the prefill budget the same on both paths.
            return AddReqResult.OTHER
        states = sorted(s for s in map(self._future, [req, *self.running_reqs, *self.can_run_list])
                        if s[0] > 0)
        free, freed = self.cur_rem_tokens - inp, 0
        for i, (tokens_left, tokens_occupied) in enumerate(states):
            remaining = len(states) - i
            if free + freed - tokens_left * remaining <= IGNORE_EOS_RESERVE_TOKENS * remaining:
                return AddReqResult.NO_TOKEN
            freed += tokens_occupied
        if self.rem_chunk_tokens is None or req.extend_input_len <= self.rem_chunk_tokens:
            self.can_run_list.append(req)
            self._update_prefill_budget(inp, min(req.sampling_params.max_new_tokens, CLIP_MAX_NEW_TOKENS))
        else:
            if self.rem_chunk_tokens <= 0:
                return AddReqResult.OTHER
            req.set_extend_input_len(self.rem_chunk_tokens)
            req.fill_ids = req.fill_ids[: len(req.prefix_indices) + self.rem_chunk_tokens]
            self.can_run_list.append(req)
            self.new_chunked_req = req
            self._update_prefill_budget(self.rem_chunk_tokens, 0)
        return self.budget_state()

    def _future(self, r: Req) -> tuple[float, int]:
        """(tokens left to generate, tokens it occupies now) for the ignore_eos simulation."""
        ratio = 1.0 if r.sampling_params.ignore_eos else self.new_token_ratio
        left = r.sampling_params.max_new_tokens * ratio - len(r.output_ids)
        return left, len(r.origin_input_ids) + len(r.output_ids)

    def _admit(self, req: Req) -> None:
        self.can_run_list.append(req)
        self.mem.tree_cache.inc_lock_ref(req.last_node)
