"""`RadixCache`: a radix tree from token prefixes to the KV slots holding them (§4).

Keys are page-aligned when page_size > 1 (a node's key length is a multiple of the page
size, and children are keyed by their first page). LRU order is a logical tick advanced on
every `match_prefix` and `insert` call that touches the tree; the nodes a call matches get
its tick. Eviction pops the least recently used unlocked leaf (ties: the older node) and
removes it whole, so it may free more than asked.

NOTE: as in SGLang, a node is stamped before a match that ends inside it splits it, so
both halves count as just used (the unmatched remainder too).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shared.memory.prefix_cache import MatchResult
from shared.memory.req_to_token_pool import ReqToTokenPool
from shared.memory.token_allocator import TokenToKVPoolAllocator
from shared.memory.tree_node import TreeNode

if TYPE_CHECKING:
    from shared.request.req import Req


class Inserted(NamedTuple):
    """What `_insert` did: the node holding the key's last token, the slot arrays of the
    nodes along the path (concatenated, the key's slots in the tree) and the length the tree
    already held."""

    node: TreeNode
    slots: list[np.ndarray]
    matched: int


class RadixCache:
    """The shared-prefix KV cache. See `PrefixCache` for the contract of each method."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: TokenToKVPoolAllocator) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.page_size = allocator.page_size
        self._tick = 0
        self._num_nodes = 0
        empty = np.zeros(0, dtype=np.int64)
        self.root = TreeNode(empty, empty, None, self._new_id(), 0, lock_ref=1)
        self._evictable_size = 0
        self._protected_size = 0
        self._evictable_leaves: set[TreeNode] = set()
        # NOTE: a lazy LRU heap of (last_access, node_id, push number, node): every evictable
        # leaf has an entry with its current last_access; entries of nodes that left the leaf
        # set or were touched since are stale and skipped when popped.
        self._lru: list[tuple[int, int, int, TreeNode]] = []
        self._pushes = 0

    # --- queries -----------------------------------------------------------------------

    def evictable_size(self) -> int:
        return self._evictable_size

    def protected_size(self) -> int:
        return self._protected_size

    def total_size(self) -> int:
        return self._evictable_size + self._protected_size

    def match_prefix(self, key: Sequence[int]) -> MatchResult:
        key = self._page_aligned(key)
        if len(key) == 0:
            return MatchResult(np.zeros(0, dtype=np.int64), self.root)
        node, values, _ = self._walk(key)
        return MatchResult(np.concatenate(values) if values else key[:0], node)

    # --- updates -----------------------------------------------------------------------

    def insert(self, key: Sequence[int], value: np.ndarray) -> int:
        return self._insert(key, value).matched

    def _insert(self, key: Sequence[int], value: np.ndarray) -> Inserted:
        """insert, also returning what a match_prefix of the key right after would (without
        a second walk)."""
        key = self._page_aligned(key)
        if len(key) == 0:
            return Inserted(self.root, [], 0)
        node, values, matched = self._walk(key)
        if matched < len(key):
            leaf = np.array(value[matched : len(key)], dtype=np.int64)
            node = self._add_leaf(node, key[matched:].copy(), leaf)
            values.append(leaf)
        return Inserted(node, values, matched)

    def _insert_after(self, start: TreeNode, offset: int, key: np.ndarray, value: np.ndarray) -> int:
        """insert of a key whose first `offset` tokens are the path root -> `start` (a locked
        prefix), given the rest (`offset` and the rest page-aligned; int64 arrays the tree
        may keep: the caller owns no other reference): that path is touched as a walk from
        the root would touch it, and the walk goes on from `start`. Returns the matched
        length, counted from the root."""
        node, _, matched = self._walk(key, start)
        if matched < len(key):
            self._add_leaf(node, key[matched:], value[matched:])
        return offset + matched

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        committed = req.pop_committed_kv_cache()
        kv = self.req_to_token_pool.req_to_token[req.req_pool_idx, :committed].astype(np.int64)
        aligned = committed // self.page_size * self.page_size
        protected = req.cache_protected_len
        if is_insert and protected and aligned:
            # NOTE: the locked prefix [0, protected) is the path to last_node: no need to match it
            already = self._insert_after(req.last_node, protected, req.token_ids(protected, aligned),
                                         kv[protected:aligned].copy())
            if already > protected:
                self.allocator.free(kv[protected:already])
        elif is_insert:
            tokens = req.all_token_ids()[:aligned]
            already = self.insert(tokens, kv[:aligned])
            self.allocator.free(kv[req.cache_protected_len : already])
        else:
            self.allocator.free(kv[req.cache_protected_len : aligned])
        if aligned < committed:  # NOTE: a partial last page (page_size > 1) only
            self.allocator.free(kv[aligned:])
        self.dec_lock_ref(req.last_node)

    def cache_unfinished_req(self, req: Req) -> None:
        # Row layout before:  [0, protected) tree's slots | [protected, n) this request's slots
        # after:              [0, aligned) tree's slots   | [aligned, n) private partial page
        row = req.req_pool_idx
        n = len(req.fill_ids)
        kv = self.req_to_token_pool.req_to_token[row, :n].astype(np.int64)
        aligned = n // self.page_size * self.page_size
        protected = req.cache_protected_len
        # NOTE: the key is the inserted one, so its match is the walk plus the new leaf; the
        # path keeps a single tick (LRU order is the same as with a second walk).
        ins = self._insert(req.fill_ids[:aligned], kv[:aligned])
        if ins.matched > protected:  # NOTE: slots the tree held already: this row's copies go
            self.allocator.free(kv[protected : ins.matched])
        tree_slots, new_last = np.concatenate(ins.slots) if ins.slots else kv[:0], ins.node
        if len(tree_slots) != aligned:
            raise AssertionError(f"cache_unfinished_req: matched {len(tree_slots)} of {aligned}")
        # NOTE: the row holds the tree's slots below `protected` and its own from there; they
        # differ from the tree's only where the walk matched what another request inserted.
        if ins.matched > protected:
            self.req_to_token_pool.write(row, protected, tree_slots[protected : ins.matched])
        self.dec_lock_ref(req.last_node)
        self.inc_lock_ref(new_last)
        req.prefix_indices = tree_slots if aligned == n else np.concatenate((tree_slots, kv[aligned:]))
        req.cache_protected_len = aligned
        req.last_node = new_last

    def inc_lock_ref(self, node: TreeNode | None) -> None:
        for x in self._path_to_root(node):
            if x.lock_ref == 0:
                self._evictable_size -= len(x.key)
                self._protected_size += len(x.key)
            x.lock_ref += 1
            self._evictable_leaves.discard(x)

    def dec_lock_ref(self, node: TreeNode | None) -> None:
        for x in self._path_to_root(node):
            if x.lock_ref <= 0:
                raise AssertionError(f"dec_lock_ref on unlocked {x!r}")
            x.lock_ref -= 1
            if x.lock_ref == 0:
                self._evictable_size += len(x.key)
                self._protected_size -= len(x.key)
                self._refresh_leaf(x)

    def evict(self, num_tokens: int) -> int:
        evicted, freed = 0, []
        while evicted < num_tokens:
            x = self._pop_lru()
            if x is None:
                break
            freed.append(x.value)
            evicted += self._delete_leaf(x)  # its parent may become a leaf (and is pushed)
        self.allocator.free_each(freed)   # NOTE: the leaves' slots, in eviction order
        return evicted

    # --- integrity ---------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Sizes, leaf set, lock counts, page alignment and slot ownership are consistent."""
        if self.root.lock_ref != 1:
            raise AssertionError("root lock_ref must stay 1")
        evictable = protected = 0
        leaves, slots = set(), []
        for x in self._nodes():
            self._check_node(x)
            evictable += len(x.key) if x.lock_ref == 0 else 0
            protected += len(x.key) if x.lock_ref > 0 else 0
            if x.lock_ref == 0 and not x.children:
                leaves.add(x)
            slots.append(x.value)
        if (evictable, protected) != (self._evictable_size, self._protected_size):
            raise AssertionError(f"sizes {(evictable, protected)} != recorded "
                                 f"{(self._evictable_size, self._protected_size)}")
        if leaves != self._evictable_leaves:
            raise AssertionError("evictable leaf set is stale")
        if not leaves <= {x for t, _, _, x in self._lru if t == x.last_access}:
            raise AssertionError("an evictable leaf has no current entry in the LRU heap")
        all_slots = np.concatenate(slots) if slots else np.zeros(0, np.int64)
        if np.unique(all_slots).size != all_slots.size:
            raise AssertionError("a KV slot is held by two tree nodes")
        if all_slots.size and self.allocator.is_free(all_slots).any():
            raise AssertionError("a KV slot held by the tree is on the allocator's free list")

    # --- helpers -----------------------------------------------------------------------

    def _new_id(self) -> int:
        self._num_nodes += 1
        return self._num_nodes

    def _page_aligned(self, key: Sequence[int]) -> np.ndarray:
        key = np.asarray(key, dtype=np.int64)
        return key[: len(key) // self.page_size * self.page_size]

    def _child_key(self, key: np.ndarray) -> int | tuple[int, ...]:
        return int(key[0]) if self.page_size == 1 else tuple(key[: self.page_size].tolist())

    def _match_len(self, a: np.ndarray, b: np.ndarray) -> int:
        n = min(len(a), len(b))
        differ = a[:n] != b[:n]
        first = int(differ.argmax()) if n else 0       # argmax: the first True (0 if none)
        common = first if n and differ[first] else n
        return common // self.page_size * self.page_size

    def _walk(self, key: np.ndarray, start: TreeNode | None = None
              ) -> tuple[TreeNode, list[np.ndarray], int]:
        """Follow `key` down from the root (or from `start`, after touching its path from
        the root top-down), splitting where the match ends inside a node; touch the matched
        nodes. Returns (deepest matched node, their values, matched length past start)."""
        self._tick += 1
        if start is not None:
            for x in reversed(list(self._path_to_root(start))):
                x.last_access = self._tick
                if x in self._evictable_leaves:
                    self._push_lru(x)
        node, values, matched = self.root if start is None else start, [], 0
        while matched < len(key):
            child = node.children.get(self._child_key(key[matched:]))
            if child is None:
                break
            n = self._match_len(child.key, key[matched:])
            child.last_access = self._tick
            if child in self._evictable_leaves:
                self._push_lru(child)
            if n < len(child.key):
                child = self._split(child, n)  # the upper half takes child's new tick
            values.append(child.value)
            node, matched = child, matched + n
        return node, values, matched

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut `child` after n tokens; the new upper node takes child's place and lock count."""
        parent = child.parent
        upper = TreeNode(child.key[:n], child.value[:n], parent, self._new_id(),
                         child.last_access, lock_ref=child.lock_ref)
        parent.children[self._child_key(upper.key)] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[self._child_key(child.key)] = child
        return upper

    def _add_leaf(self, parent: TreeNode, key: np.ndarray, value: np.ndarray) -> TreeNode:
        leaf = TreeNode(key, value, parent, self._new_id(), self._tick)
        parent.children[self._child_key(key)] = leaf
        self._evictable_size += len(key)
        self._evictable_leaves.discard(parent)
        self._evictable_leaves.add(leaf)
        self._push_lru(leaf)
        return leaf

    def _delete_leaf(self, x: TreeNode) -> int:
        """Take leaf x out of the tree (its slots are the caller's to free)."""
        del x.parent.children[self._child_key(x.key)]
        self._evictable_size -= len(x.key)
        self._evictable_leaves.discard(x)
        self._refresh_leaf(x.parent)
        return len(x.key)

    def _refresh_leaf(self, x: TreeNode) -> None:
        if x is not self.root and x.lock_ref == 0 and not x.children:
            if x not in self._evictable_leaves:
                self._evictable_leaves.add(x)
                self._push_lru(x)
        else:
            self._evictable_leaves.discard(x)

    def _push_lru(self, x: TreeNode) -> None:
        if len(self._lru) > 2 * len(self._evictable_leaves) + 64:  # mostly stale: rebuild
            self._lru = [(y.last_access, y.node_id, 0, y) for y in self._evictable_leaves]
            heapq.heapify(self._lru)
        self._pushes += 1
        heapq.heappush(self._lru, (x.last_access, x.node_id, self._pushes, x))

    def _pop_lru(self) -> TreeNode | None:
        """The least recently used evictable leaf (ties: the older node), off the heap."""
        while self._lru:
            t, _, _, x = heapq.heappop(self._lru)
            if t == x.last_access and x in self._evictable_leaves:
                return x
        return None

    def _path_to_root(self, node: TreeNode | None) -> Iterator[TreeNode]:
        while node is not None and node is not self.root:
            yield node
            node = node.parent

    def _nodes(self) -> Iterator[TreeNode]:
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            stack.extend(x.children.values())
            yield x

    def _check_node(self, x: TreeNode) -> None:
        if len(x.key) == 0 or len(x.key) != len(x.value) or len(x.key) % self.page_size:
            raise AssertionError(f"{x!r}: key/value lengths {len(x.key)}/{len(x.value)}")
        if x.parent.children.get(self._child_key(x.key)) is not x:
            raise AssertionError(f"{x!r} is not its parent's child under its first page")
        if x.lock_ref < sum(c.lock_ref for c in x.children.values()):
            raise AssertionError(f"{x!r}: lock_ref below its children's")
