"""`PrefillAdder`: which waiting requests fit into the next prefill (semantics §5.2).

Budgets, with A = free KV tokens and E = evictable cached tokens, both read fresh:

    rem_total_tokens = A + E - (decode growth reserved for running and admitted requests)
    cur_rem_tokens   = A + E - (what this prefill takes now)
    rem_input_tokens = max_prefill_tokens - (tokens admitted so far)
    rem_chunk_tokens = chunked_prefill_size - (tokens admitted so far)

Mixed chunking pre-charges the prefill and chunk budgets with the running batch size M (one
decode token each) and the two KV budgets with the slots those decodes take (M at page size
1; a whole page for each request at a page boundary). A running request reserves
min(max_new - outputs, 4096) * new_token_ratio tokens.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from shared.memory.chunk_cache import ChunkCache
from shared.memory.kv_memory import KVMemory
from shared.request.req import Req
from shared.request.validation import CLIP_MAX_NEW_TOKENS

IGNORE_EOS_RESERVE_TOKENS = 1


class AddReqResult(Enum):
    CONTINUE = 1  # the next request may fit too
    NO_TOKEN = 2  # out of KV budget: the running batch is full
    OTHER = 3     # out of prefill or chunk budget for this round


class PrefillAdder:
    def __init__(self, mem: KVMemory, running_reqs: list[Req], new_token_ratio: float,
                 max_prefill_tokens: int, chunk_size: int | None, mixed_decode_tokens: int = 0,
                 running_remaining: np.ndarray | None = None,
                 mixed_decode_kv: int | None = None) -> None:
        """`running_remaining` ([R] int64), when given, is max_new_tokens - len(output_ids)
        of each running request (ScheduleBatch.remaining_new_tokens). `mixed_decode_kv`: KV
        slots the mixed decodes take (ScheduleBatch.new_tokens_required_next_decode;
        default one each).

        NOTE: SGLang charges the KV budgets M tokens too; at page size > 1 the decodes of a
        MIXED step can need up to M pages, and the prefill would have taken them."""
        self.mem = mem
        self.ps = mem.page_size
        self.running_reqs = running_reqs
        self.new_token_ratio = new_token_ratio
        m = mixed_decode_tokens
        kv = m if mixed_decode_kv is None else mixed_decode_kv
        self.rem_input_tokens = max_prefill_tokens - m
        self.rem_chunk_tokens = None if chunk_size is None else chunk_size - m
        if running_remaining is None:
            remaining = [min(r.sampling_params.max_new_tokens - len(r.output_ids), CLIP_MAX_NEW_TOKENS)
                         for r in running_reqs]
        else:
            remaining = np.minimum(running_remaining, CLIP_MAX_NEW_TOKENS).tolist()
        self.rem_total_token_offset = kv + sum(map(new_token_ratio.__mul__, remaining))
        self.cur_rem_token_offset = kv
        self.can_run_list: list[Req] = []
        self.new_chunked_req: Req | None = None
        self.chunked_continues = False  # the scheduler's chunked request has chunks left

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
        """Charge an admitted extend of `extend` tokens, page-rounded as SGLang charges it
        (`ceil_paged_tokens`), so no sub-page chunk budget is left behind."""
        extend = self.ceil_paged(extend)
        self.rem_total_token_offset += extend + max_new + self.ps
        self.cur_rem_token_offset += extend + self.ps
        self.rem_input_tokens -= extend
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend

    def add_chunked_req(self, req: Req) -> Req | None:
        """Continue the chunked request with the next chunk. Returns it while more chunks
        remain, None after its last chunk.

        NOTE: SGLang always adds it. We cut the chunk to the tokens whose KV fits now
        (`chunk_room`), and when not even one does, skip it this round instead of running
        out of memory mid-prefill: it stays the chunked request, its KV locked in the
        cache, and the decode memory check retracts it before it would abort the last
        running request (ScheduleBatch.retract_decode)."""
        rem = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
        if rem <= 0:
            rem = self.rem_chunk_tokens
        rem = min(rem, self.chunk_room(req))
        self.chunked_continues = True
        if rem <= 0:
            req.fill_ids = req.fill_ids[: len(req.prefix_indices)]  # only what is computed
            return req
        truncated = self.chunked_continues = req.extend_input_len > rem
        req.set_extend_input_len(min(req.extend_input_len, rem))
        req.fill_ids = req.fill_ids[: len(req.prefix_indices) + req.extend_input_len]
        self.can_run_list.append(req)
        self._update_prefill_budget(
            req.extend_input_len, 0 if truncated else min(req.sampling_params.max_new_tokens, CLIP_MAX_NEW_TOKENS))
        return req if truncated else None

    def chunk_room(self, req: Req) -> int:
        """The most tokens of the chunked `req`'s next chunk whose KV fits now: the rest of
        the partial page its prefix ends in (its own, no new page) plus the whole pages
        cur_rem_tokens holds. NOTE: a chunk is charged the pages it really takes; reserving
        a page on top (SGLang's hybrid-SWA `- page_size`) skipped a chunk that needed none."""
        own = -len(req.prefix_indices) % self.ps
        return own + max(int(self.cur_rem_tokens), 0) // self.ps * self.ps

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
        if trunc <= 0 or self.has_chunked_req():
            return AddReqResult.OTHER
        self._admit(req)
        self._cut(req, trunc)
        return self.budget_state()

    def has_chunked_req(self) -> bool:
        """A request of this round stays chunked after it: no other may be cut."""
        return self.chunked_continues or self.new_chunked_req is not None

    def _cut(self, req: Req, trunc: int) -> None:
        """Make the admitted `req` this round's one chunked request, its extend cut to
        `trunc` tokens."""
        assert not self.has_chunked_req(), "at most one chunked request per prefill"
        req.set_extend_input_len(trunc)
        req.fill_ids = req.fill_ids[: len(req.prefix_indices) + trunc]
        self.new_chunked_req = req
        self._update_prefill_budget(trunc, 0)

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
            return self.budget_state()
        if self.rem_chunk_tokens <= 0 or self.has_chunked_req():
            # NOTE: SGLang's ignore_eos path cuts without this check; a second chunked
            # request would take its first sample before its prompt is in the KV cache.
            return AddReqResult.OTHER
        self.can_run_list.append(req)
        self._cut(req, self.rem_chunk_tokens)
        return self.budget_state()

    def _future(self, r: Req) -> tuple[float, int]:
        """(tokens left to generate, tokens it occupies now) for the ignore_eos simulation."""
        ratio = 1.0 if r.sampling_params.ignore_eos else self.new_token_ratio
        left = r.sampling_params.max_new_tokens * ratio - len(r.output_ids)
        return left, len(r.origin_input_ids) + len(r.output_ids)

    def _admit(self, req: Req) -> None:
        self.can_run_list.append(req)
        self.mem.tree_cache.inc_lock_ref(req.last_node)
