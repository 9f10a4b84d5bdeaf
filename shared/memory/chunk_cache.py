"""`ChunkCache`: the prefix cache when the radix cache is disabled (semantics §4.7).

Nothing is shared between requests; a chunked request still keeps its earlier chunks'
KV as its prefix between chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.memory.prefix_cache import MatchResult
from shared.memory.req_to_token_pool import ReqToTokenPool
from shared.memory.token_allocator import TokenToKVPoolAllocator

if TYPE_CHECKING:
    from shared.request.req import Req


class ChunkCache:
    """The `PrefixCache` interface with no sharing: empty matches, nothing evictable."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: TokenToKVPoolAllocator) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.page_size = allocator.page_size

    def match_prefix(self, key: Sequence[int]) -> MatchResult:
        return MatchResult(np.zeros(0, dtype=np.int64), None)

    def insert(self, key: Sequence[int], value: np.ndarray) -> int:
        return 0

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        committed = req.pop_committed_kv_cache()
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        self.allocator.free(row[:committed])

    def cache_unfinished_req(self, req: Req) -> None:
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        req.prefix_indices = row[: len(req.fill_ids)].astype(np.int64)

    def inc_lock_ref(self, node: Any) -> None:
        return None

    def dec_lock_ref(self, node: Any) -> None:
        return None

    def evict(self, num_tokens: int) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def check_integrity(self) -> None:
        return None
