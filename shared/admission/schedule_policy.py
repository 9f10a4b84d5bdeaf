"""`SchedulePolicy`: the order in which waiting requests are offered to prefill (semantics §5.1).

`calc_priority` reorders the waiting queue in place; the `PrefillAdder` then admits from its
front. Policies:

    fcfs        arrival order (unchanged)
    lof         longest output first: decreasing `max_new_tokens`
    random      a shuffle drawn from the `random.Random` passed in
    lpm         longest cached prefix first; requests that share a new long prefix with an
                earlier waiting request wait behind the rest (in-batch prefix dedup)
    dfs-weight  depth-first over the radix tree, heaviest subtree first, so requests that
                share cached prefixes are admitted together

The cache-aware policies (`lpm`, `dfs-weight`) become `fcfs` when the radix cache is
disabled, and `lpm` is `fcfs` for any call that sees more than 128 waiting requests.
Every sort is Python's stable sort: ties keep arrival order.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import numpy as np

from shared.config.engine_config import SCHEDULE_POLICIES
from shared.memory.radix_cache import RadixCache
from shared.memory.req_to_token_pool import ReqToTokenPool
from shared.memory.token_allocator import TokenToKVPoolAllocator
from shared.memory.tree_node import TreeNode

if TYPE_CHECKING:
    from shared.memory.prefix_cache import PrefixCache
    from shared.request.req import Req

POLICIES = SCHEDULE_POLICIES
CACHE_AWARE_POLICIES = frozenset({"lpm", "dfs-weight"})
# A request whose real-tree match is at most this long is checked against the waiting queue.
IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = 32
# ... and deprioritised when an earlier waiting request shares at least this many tokens.
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD = 32
# LPM does no matching or sorting for a call that sees more waiting requests than this.
LPM_MAX_WAITING = 128


def effective_policy(policy: str, tree_cache: PrefixCache) -> str:
    """The policy that will actually run: `policy` itself, or `fcfs` for a cache-aware
    policy over a disabled (non-radix) cache. Raises ValueError for an unknown name."""
    if policy not in POLICIES:
        raise ValueError(f"Unknown schedule_policy: {policy!r} (expected one of {POLICIES})")
    if policy in CACHE_AWARE_POLICIES and not isinstance(tree_cache, RadixCache):
        return "fcfs"
    return policy


class SchedulePolicy:
    """Orders a waiting queue by one policy. `policy` is the effective policy (see
    `effective_policy`); `rng` is the only source of randomness (policy `random`)."""

    def __init__(self, policy: str, tree_cache: PrefixCache, rng: random.Random) -> None:
        self.policy = effective_policy(policy, tree_cache)
        self.tree_cache = tree_cache
        self.rng = rng

    def calc_priority(self, waiting_queue: list[Req]) -> bool:
        """Reorder `waiting_queue` in place (a permutation of the same Req objects). Returns
        True when each request's `prefix_indices` / `last_node` were just matched against
        the tree cache (SGLang's `prefix_computed`); they are recomputed at admission anyway."""
        policy = self.active_policy(len(waiting_queue))
        if policy in CACHE_AWARE_POLICIES:
            self._sort_cache_aware(policy, waiting_queue)
            return True
        if policy == "lof":
            waiting_queue.sort(key=lambda r: -r.sampling_params.max_new_tokens)
        elif policy == "random":
            self.rng.shuffle(waiting_queue)
        return False

    def active_policy(self, num_waiting: int) -> str:
        """The policy for one call: LPM turns into FCFS above LPM_MAX_WAITING requests."""
        if self.policy == "lpm" and num_waiting > LPM_MAX_WAITING:
            return "fcfs"
        return self.policy

    def _sort_cache_aware(self, policy: str, queue: list[Req]) -> None:
        deferred = self._compute_prefix_matches(queue, in_batch_dedup=policy == "lpm")
        if policy == "lpm":
            queue[:] = longest_prefix_order(queue, deferred)
        else:
            queue[:] = dfs_weight_order(queue, self.tree_cache.root)

    def _compute_prefix_matches(self, queue: list[Req], in_batch_dedup: bool) -> list[bool]:
        """Match every request against the tree cache (sets `prefix_indices`, `last_node`).
        Returns, per request, whether in-batch prefix dedup deprioritises it this call."""
        waiting_tree = new_waiting_queue_tree() if in_batch_dedup else None
        deferred = []
        for r in queue:
            key = r.all_token_ids()
            r.prefix_indices, r.last_node = self.tree_cache.match_prefix(key)
            deferred.append(waiting_tree is not None
                            and defer_in_batch(waiting_tree, key, len(r.prefix_indices)))
        return deferred


def new_waiting_queue_tree() -> RadixCache:
    """An empty page-size-1 radix tree of waiting requests' tokens (values are dummies: a
    new leaf never touches the allocator, and nothing is ever evicted from it)."""
    return RadixCache(ReqToTokenPool(1, 1), TokenToKVPoolAllocator(1, 1))


def defer_in_batch(waiting_tree: RadixCache, key: list[int], cached_len: int) -> bool:
    """In-batch prefix dedup for one request with `cached_len` tokens in the real cache.

    A request with a short real match that shares a long prefix with an earlier waiting
    request is deferred (so it can hit the cache once that one has run); otherwise its
    tokens join `waiting_tree` for the requests after it.
    """
    if cached_len > IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD:
        return False
    shared = len(waiting_tree.match_prefix(key).device_indices)
    if shared >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
        return True
    waiting_tree.insert(key, np.zeros(len(key), dtype=np.int64))
    return False


def longest_prefix_order(queue: list[Req], deferred: list[bool]) -> list[Req]:
    """`queue` stably sorted by decreasing cached prefix length, deferred requests last."""
    keys = [math.inf if d else -len(r.prefix_indices) for r, d in zip(queue, deferred, strict=True)]
    return [queue[i] for i in sorted(range(len(queue)), key=keys.__getitem__)]


def dfs_weight_order(queue: list[Req], root: TreeNode) -> list[Req]:
    """Post-order DFS over the subtrees holding some request's `last_node`: children by
    decreasing weight (waiting requests at or below them; ties: insertion order), then the
    node's own requests in queue order. Deeper matches precede their ancestors'; root's
    requests come last."""
    by_node: dict[TreeNode, list[Req]] = {}
    for r in queue:
        by_node.setdefault(r.last_node, []).append(r)
    weight = subtree_weights(by_node)
    order: list[Req] = []
    stack: list[tuple[TreeNode, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.extend(by_node.get(node, ()))
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(heaviest_children(node, weight)))
    if len(order) != len(queue):
        raise AssertionError("dfs-weight: a request's last_node is not in the tree cache")
    return order


def subtree_weights(by_node: dict[TreeNode, list[Req]]) -> dict[TreeNode, int]:
    """Per node: how many requests have their `last_node` at or below it (nodes with none
    are absent)."""
    weight: dict[TreeNode, int] = {}
    for node, reqs in by_node.items():
        x = node
        while x is not None:
            weight[x] = weight.get(x, 0) + len(reqs)
            x = x.parent
    return weight


def heaviest_children(node: TreeNode, weight: dict[TreeNode, int]) -> list[TreeNode]:
    """`node`'s children with weight > 0, heaviest first; ties keep the children's
    insertion order (as SGLang's stable sort over the children dict: a node split by a match
    keeps its place, though the upper half is a new node)."""
    kids = [c for c in node.children.values() if c in weight]
    return sorted(kids, key=lambda c: -weight[c])
