"""RadixCache against a reference of cached page prefixes, their slots and last-use ticks (§4)."""

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from shared import RadixCache, ReqToTokenPool, TokenToKVPoolAllocator
from tests.strategies import small_page_sizes, token_keys


class RadixMachine(RuleBasedStateMachine):
    """Reference: `present` maps every cached page prefix (a token tuple, a multiple of the
    page size long) to the slots of its last page, and `tick` to the last call that used it;
    `bounds` holds the prefixes at which a tree node ends (an insert's end, a split), since
    a call that ends inside a node stamps the whole node before splitting it (SGLang's
    `_match_prefix_helper` sets `child.last_access_time` before `_split_node`)."""

    @initialize(ps=small_page_sizes, num_pages=st.integers(4, 24))
    def setup(self, ps, num_pages):
        self.ps = ps
        self.allocator = TokenToKVPoolAllocator(num_pages * ps, ps)
        self.cache = RadixCache(ReqToTokenPool(1, 8), self.allocator)
        self.present: dict[tuple, np.ndarray] = {}
        self.tick: dict[tuple, int] = {}
        self.bounds: set[tuple] = set()
        self.calls = 0
        self.locks: list[tuple] = []

    def _pages(self, key):
        """Page prefixes of the page-aligned part of `key`."""
        n = len(key) // self.ps
        return [tuple(key[: (k + 1) * self.ps]) for k in range(n)]

    def _expected_match(self, key):
        matched = []
        for prefix in self._pages(key):
            if prefix not in self.present:
                break
            matched.append(prefix)
        return matched

    def _node_below(self, prefix):
        """The cached pages past `prefix` in the node `prefix` ends inside (none at a bound)."""
        rest = []
        while prefix not in self.bounds:
            prefix = next(q for q in self.present
                          if len(q) == len(prefix) + self.ps and q[: len(prefix)] == prefix)
            rest.append(prefix)
        return rest

    def _touch(self, key, matched, inserted=()):
        """A call on `key` that matched the pages `matched` (then inserted `inserted`)."""
        if not self._pages(key):
            return
        self.calls += 1
        split = matched[-1:]
        for p in [*matched, *(self._node_below(split[0]) if split else []), *inserted]:
            self.tick[p] = self.calls
        self.bounds.update(split + list(inserted[-1:]))

    @rule(key=token_keys())
    def match_equals_longest_cached_prefix(self, key):
        """match_prefix returns the longest cached page-aligned prefix, with its slots."""
        expected = self._expected_match(key)
        got = self.cache.match_prefix(key)
        want = [self.present[p] for p in expected]
        assert got.device_indices.tolist() == (np.concatenate(want).tolist() if want else [])
        self._touch(key, expected)

    @rule(key=token_keys())
    def insert_reports_cached_length(self, key):
        """insert returns the length already cached; the rest of the key becomes cached."""
        aligned = len(key) // self.ps * self.ps
        slots = self.allocator.alloc(aligned)
        if slots is None:
            self._evict_and_check(aligned)
            slots = self.allocator.alloc(aligned)
            if slots is None:
                return
        matched = self._expected_match(key)
        already = len(matched) * self.ps
        assert self.cache.insert(key, slots) == already
        self.allocator.free(slots[:already])
        self._touch(key, matched, self._pages(key)[len(matched):])
        for k, prefix in enumerate(self._pages(key)):
            self.present.setdefault(prefix, slots[k * self.ps : (k + 1) * self.ps])

    @rule(key=token_keys())
    def lock(self, key):
        """Lock the matched node: its whole path becomes protected."""
        expected = self._expected_match(key)
        got = self.cache.match_prefix(key)
        self._touch(key, expected)
        before = self.cache.protected_size()
        self.cache.inc_lock_ref(got.last_node)
        newly = [p for p in expected if not any(p == q[: len(p)] for q, _ in self.locks)]
        assert self.cache.protected_size() == before + len(newly) * self.ps
        self.locks.append((expected[-1] if expected else (), got.last_node))

    @rule(data=st.data())
    def match_inside_locked_path(self, data):
        """Matching part of a locked path splits a locked node; the lock stays whole."""
        if self.locks:
            locked_key = data.draw(st.sampled_from([q for q, _ in self.locks]))
            cut = data.draw(st.integers(0, len(locked_key)))
            self.match_equals_longest_cached_prefix([*locked_key[:cut], 7])

    @rule(data=st.data())
    def unlock(self, data):
        """Undo one lock."""
        if self.locks:
            i = data.draw(st.integers(0, len(self.locks) - 1))
            _, node = self.locks.pop(i)
            self.cache.dec_lock_ref(node)

    @rule(n=st.integers(1, 40))
    def evict(self, n):
        """Eviction frees whole unlocked leaves, least recently used first, and enough of them."""
        self._evict_and_check(n)

    def _evict_and_check(self, n):
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(n)
        gone = {p for p, slots in self.present.items() if self.allocator.is_free(slots).all()}
        assert freed == len(gone) * self.ps
        assert min(n, evictable) <= freed <= evictable
        locked = {p for q, _ in self.locks for p in self._pages(list(q))}
        assert not gone & locked, "a locked prefix was evicted"
        for p in gone:
            assert all(q in gone for q in self.present if q[: len(p)] == p), "not a whole leaf"
        survivors = [p for p in self.present if p not in gone and p not in locked]
        leaves = [p for p in survivors
                  if not any(len(q) > len(p) and q[: len(p)] == p and q not in gone
                             for q in self.present)]
        if gone and leaves:
            assert max(self.tick[p] for p in gone) <= min(self.tick[p] for p in leaves)
        for p in gone:
            del self.present[p], self.tick[p]
            self.bounds.discard(p)

    @invariant()
    def slots_are_conserved(self):
        """available + evictable + protected == total, and the tree's own checks pass."""
        if hasattr(self, "cache"):
            c = self.cache
            assert self.allocator.available_size() + c.evictable_size() + c.protected_size() \
                == self.allocator.size
            assert c.total_size() == len(self.present) * self.ps
            c.check_integrity()


RadixMachine.TestCase.settings = settings(max_examples=max(200, settings.default.max_examples))
TestRadixCacheAgainstReference = RadixMachine.TestCase


def _cache(size=64, ps=1):
    allocator = TokenToKVPoolAllocator(size, ps)
    return RadixCache(ReqToTokenPool(4, 64), allocator), allocator


def test_evict_takes_least_recently_used_leaf():
    """After touching A, evicting one token removes B (older), not A or C (newer)."""
    cache, alloc = _cache()
    for key in ([1, 1], [2, 2], [3, 3]):
        cache.insert(key, alloc.alloc(2))
    cache.match_prefix([1, 1])
    assert cache.evict(1) == 2
    assert len(cache.match_prefix([2, 2]).device_indices) == 0
    assert len(cache.match_prefix([1, 1]).device_indices) == 2
    assert len(cache.match_prefix([3, 3]).device_indices) == 2


def test_match_splits_node_and_keeps_slots():
    """A match ending inside a node splits it; both halves keep their slots."""
    cache, alloc = _cache()
    slots = alloc.alloc(6)
    cache.insert([5, 6, 7, 8, 9, 10], slots)
    assert cache.match_prefix([5, 6, 7, 0]).device_indices.tolist() == slots[:3].tolist()
    assert cache.match_prefix([5, 6, 7, 8, 9, 10]).device_indices.tolist() == slots.tolist()
    cache.check_integrity()


def test_paged_match_is_page_aligned():
    """With page size 4, a 7-token common prefix matches 4 tokens."""
    cache, alloc = _cache(ps=4)
    cache.insert(list(range(8)), alloc.alloc(8))
    assert len(cache.match_prefix([0, 1, 2, 3, 4, 5, 6, 99]).device_indices) == 4


def test_a_split_stamps_both_halves_as_just_used():
    """SGLang stamps a node before a match splits it: after matching [1, 2] inside [1, 2, 3, 4],
    the remainder [3, 4] is newer than [9, 9] (inserted later than [1, 2, 3, 4]), so [9, 9]
    is evicted first."""
    cache, alloc = _cache()
    cache.insert([1, 2, 3, 4], alloc.alloc(4))
    cache.insert([9, 9], alloc.alloc(2))
    cache.match_prefix([1, 2, 7])
    assert cache.evict(1) == 2
    assert len(cache.match_prefix([9, 9]).device_indices) == 0
    assert len(cache.match_prefix([1, 2, 3, 4]).device_indices) == 4
