"""`KVMemory`: an engine's KV memory (request rows, KV slots, prefix cache) and the
allocation helpers of semantics §3.5 that keep the three consistent.

Every helper either succeeds whole or raises `KVCacheOOMError` having taken nothing (it
may have evicted unlocked cache entries first), so a failed allocation never leaks a row
or a slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shared.memory.chunk_cache import ChunkCache
from shared.memory.prefix_cache import PrefixCache
from shared.memory.radix_cache import RadixCache
from shared.memory.req_to_token_pool import ReqToTokenPool
from shared.memory.token_allocator import TokenToKVPoolAllocator

if TYPE_CHECKING:
    from shared.request.req import Req


class KVCacheOOMError(RuntimeError):
    """The KV pool cannot hold what the scheduler asked for (an admission bug, or a
    retraction that came too late)."""


class MemoryLeakError(RuntimeError):
    """At idle, some KV slot or request row is owned by nobody."""


@dataclass(frozen=True)
class KVMemory:
    req_to_token_pool: ReqToTokenPool
    allocator: TokenToKVPoolAllocator
    tree_cache: PrefixCache

    @classmethod
    def build(cls, *, max_running_requests: int, max_context_len: int, max_total_tokens: int,
              page_size: int = 1, disable_radix_cache: bool = False) -> KVMemory:
        pool = ReqToTokenPool(max_running_requests, max_context_len)
        allocator = TokenToKVPoolAllocator(max_total_tokens, page_size)
        cache_cls = ChunkCache if disable_radix_cache else RadixCache
        return cls(pool, allocator, cache_cls(pool, allocator))

    @property
    def page_size(self) -> int:
        return self.allocator.page_size

    def available_plus_evictable(self) -> int:
        return self.allocator.available_size() + self.tree_cache.evictable_size()

    def kv_used(self) -> int:
        """KV tokens taken from the allocator (by requests and the prefix cache)."""
        return self.allocator.size - self.allocator.available_size()

    def kv_in_use(self) -> int:
        """KV tokens requests hold: the prefix cache's unreferenced tokens count as free (as
        vLLM's kv_cache_usage_perc counts its free cached blocks)."""
        return self.allocator.size - self.available_plus_evictable()

    def alloc_for_extend(self, reqs: list[Req], prefix_lens: np.ndarray | None = None,
                         seq_lens: np.ndarray | None = None) -> np.ndarray:
        """Rows for requests without one, then slots for tokens [prefix, len(fill_ids)) of
        each; writes each row of `req_to_token`. Returns out_cache_loc [T] int64.
        `prefix_lens` / `seq_lens` ([B] int64), when given, are those lengths already."""
        new_rows = [r for r in reqs if r.req_pool_idx is None]
        rows = self.req_to_token_pool.alloc(len(new_rows))
        if rows is None:
            raise KVCacheOOMError(f"no free request row for {len(new_rows)} new requests; "
                                  "lower max_running_requests")
        pre = np.array([len(r.prefix_indices) for r in reqs], dtype=np.int64) \
            if prefix_lens is None else prefix_lens
        seq = np.array([len(r.fill_ids) for r in reqs], dtype=np.int64) if seq_lens is None else seq_lens
        out = self._alloc_extend_slots(reqs, pre, seq)
        if out is None:
            self.req_to_token_pool.free(rows)
            raise KVCacheOOMError(f"out of KV memory: {int((seq - pre).sum())} tokens for "
                                  f"{len(reqs)} requests, {self.allocator.available_size()} free")
        for r, row in zip(new_rows, rows, strict=True):
            r.req_pool_idx = row
        self._write_rows(reqs, pre, seq, out)
        return out

    def alloc_for_decode(self, req_pool_indices: np.ndarray, seq_lens: np.ndarray) -> np.ndarray:
        """One slot per request for the token at position seq_lens[i] (lengths before this
        step) of the request in row req_pool_indices[i]; writes `req_to_token[row, seq_lens]`.
        Returns out_cache_loc [B] int64."""
        rows = np.asarray(req_pool_indices, dtype=np.int64)
        seq = np.asarray(seq_lens, dtype=np.int64)
        table, ps = self.req_to_token_pool.req_to_token, self.allocator.page_size
        self._evict_for(len(rows) * ps)
        if ps == 1:  # NOTE: every token opens a page: the next B free slots, in order
            out = self.allocator.alloc(len(rows))
        else:
            out = self.allocator.alloc_decode(seq + 1, table[rows, seq - 1].astype(np.int64))
        if out is None:
            raise KVCacheOOMError(f"decode out of KV memory: {len(rows)} requests, "
                                  f"{self.allocator.available_size()} tokens free")
        table[rows, seq] = out
        return out

    def release_kv_cache(self, req: Req, is_insert: bool = True, allocated_len: int = 0) -> None:
        """A finished (or retracted, `is_insert=False`) request gives back its KV and row.

        `allocated_len` > kv_committed_len: slots up to it were allocated for a forward
        scheduled after the one that finished the request (the overlap schedule); they
        are freed too (SGLang's pop_overallocated_kv_cache), the pages past the committed
        tail page (that page goes back with the committed KV)."""
        committed, ps = req.kv_committed_len, self.page_size
        self.tree_cache.cache_finished_req(req, is_insert)
        start = -(-committed // ps) * ps
        if allocated_len > start:
            self.allocator.free(self.req_to_token_pool.req_to_token[req.req_pool_idx, start:allocated_len])
        self.req_to_token_pool.free(req.req_pool_idx)
        req.req_pool_idx = None

    def check_idle(self) -> None:
        """With nothing running or waiting, every slot is free or cached and every row free."""
        a, c = self.allocator, self.tree_cache
        total = a.available_size() + c.evictable_size() + c.protected_size()
        if total != a.size:
            raise MemoryLeakError(
                f"KV memory leak detected: available {a.available_size()} + evictable "
                f"{c.evictable_size()} + protected {c.protected_size()} != {a.size} tokens")
        pool = self.req_to_token_pool
        if pool.available_size() != pool.size:
            raise MemoryLeakError(f"request-row leak detected: {pool.size - pool.available_size()} "
                                  f"of {pool.size} rows still taken")

    def check_integrity(self) -> None:
        self.req_to_token_pool.check_integrity()
        self.allocator.check_integrity()
        self.tree_cache.check_integrity()

    def _alloc_extend_slots(self, reqs: list[Req], pre: np.ndarray, seq: np.ndarray) -> np.ndarray | None:
        ps = self.page_size
        need = int(np.add.reduce(seq - pre)) + (len(reqs) * ps if ps > 1 else 0)
        self._evict_for(need)
        last_loc = np.array([int(r.prefix_indices[-1]) if len(r.prefix_indices) else -1
                             for r in reqs], dtype=np.int64)
        return self.allocator.alloc_extend(pre, seq, last_loc)

    def _evict_for(self, num_tokens: int) -> None:
        if self.allocator.available_size() < num_tokens:
            self.tree_cache.evict(num_tokens)

    def _write_rows(self, reqs: list[Req], pre: np.ndarray, seq: np.ndarray, out: np.ndarray) -> None:
        pool = self.req_to_token_pool
        start = 0
        for r, p, s in zip(reqs, pre.tolist(), seq.tolist(), strict=True):
            if p:
                pool.write(r.req_pool_idx, 0, r.prefix_indices)
            pool.write(r.req_pool_idx, p, out[start : start + s - p])
            start += s - p
