"""The prefix-cache interface the scheduler talks to (semantics §4), and its result types.

Two implementations: `RadixCache` (shares KV between requests with a common prefix) and
`ChunkCache` (the radix cache disabled: nothing is shared, chunked prefill still works).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    from shared.request.req import Req


class MatchResult(NamedTuple):
    """`device_indices`: [L] int64 KV slots of the matched prefix (L page-aligned);
    `last_node`: the node to lock before the slots are used (None for ChunkCache)."""

    device_indices: np.ndarray
    last_node: Any


class PrefixCache(Protocol):
    page_size: int

    def match_prefix(self, key: Sequence[int]) -> MatchResult:
        """Longest cached page-aligned prefix of `key`. May split a node; touches LRU order.
        The slots may be evicted by a later `evict` unless `last_node` is locked first."""
        ...

    def insert(self, key: Sequence[int], value: np.ndarray) -> int:
        """Cache `key` -> `value` slots (page-aligned part only). Returns how much of `key`
        was already cached: the caller still owns `value[:that]` and must free it."""
        ...

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        """Hand a finished (or retracted, `is_insert=False`) request's KV to the cache or
        the allocator, and release its lock. The request's row is the caller's to free."""
        ...

    def cache_unfinished_req(self, req: Req) -> None:
        """Cache a request's computed KV so far; re-point its row at the cache's copy and
        move its lock to the new last node. `prefix_indices` then covers all of fill_ids.

        NOTE: SGLang's signature has `chunked=False`; it only reaches `InsertParams`, which
        its plain radix insert never reads (HiCache's and SWA's trees do), so it is not here."""
        ...

    def inc_lock_ref(self, node: Any) -> None:
        """Protect `node` and its ancestors from eviction."""
        ...

    def dec_lock_ref(self, node: Any) -> None:
        """Undo one `inc_lock_ref(node)`."""
        ...

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` unlocked tokens, least recently used leaves first
        (whole leaves, so possibly more), or all evictable ones. Returns tokens freed."""
        ...

    def evictable_size(self) -> int: ...

    def protected_size(self) -> int: ...

    def check_integrity(self) -> None:
        """Raise AssertionError if the cache's bookkeeping is inconsistent."""
        ...
