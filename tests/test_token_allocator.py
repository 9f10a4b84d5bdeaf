"""TokenToKVPoolAllocator against a model free list of page ids (semantics §3.3–§3.4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)

from shared import TokenToKVPoolAllocator
from tests.strategies import page_sizes


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class AllocatorMachine(RuleBasedStateMachine):
    """Requests grow by extends and decodes and are freed; the allocator must hand out
    exactly the slots a page-by-page model predicts."""

    reqs = Bundle("reqs")

    @initialize(ps=page_sizes, num_pages=st.integers(1, 12))
    def setup(self, ps, num_pages):
        self.ps = ps
        self.allocator = TokenToKVPoolAllocator(num_pages * ps, ps)
        self.free_model = list(range(1, num_pages + 1))
        self.owned: dict[int, list[int]] = {}
        self.next_rid = 0

    def _expected_slots(self, slots: list[int], n: int, pages: list[int]) -> list[int]:
        """Slots for n more tokens: the old partial page's tail first, then new pages."""
        pre, ps = len(slots), self.ps
        out = [slots[-1] + 1 + k for k in range(min(n, (-pre) % ps))]
        fresh = [p * ps + o for p in pages for o in range(ps)]
        return out + fresh[: n - len(out)]

    def _take(self, n_pages: int) -> list[int]:
        taken, self.free_model = self.free_model[:n_pages], self.free_model[n_pages:]
        return taken

    @rule(target=reqs, lens=st.lists(st.integers(1, 40), min_size=1, max_size=3))
    def new_requests(self, lens):
        """alloc_extend for fresh requests (empty prefix): whole pages in free-list order."""
        need = sum(_ceil_div(n, self.ps) for n in lens)
        before = self.allocator.available_size()
        got = self.allocator.alloc_extend(np.zeros(len(lens)), np.array(lens), -np.ones(len(lens)))
        if need > len(self.free_model):
            assert got is None and self.allocator.available_size() == before
            return multiple()
        rids, offset = [], 0
        for n in lens:
            pages = self._take(_ceil_div(n, self.ps))
            expected = self._expected_slots([], n, pages)
            assert got[offset : offset + n].tolist() == expected
            offset += n
            self.owned[self.next_rid] = expected
            rids.append(self.next_rid)
            self.next_rid += 1
        return multiple(*rids)

    @rule(rid=reqs, n=st.integers(1, 20))
    def extend(self, rid, n):
        """A chunk or re-prefill: the partial page's tail is filled before new pages."""
        if rid not in self.owned:
            return
        slots = self.owned[rid]
        pre = len(slots)
        need = _ceil_div(pre + n, self.ps) - _ceil_div(pre, self.ps)
        got = self.allocator.alloc_extend([pre], [pre + n], [slots[-1]])
        if need > len(self.free_model):
            assert got is None
            return
        expected = self._expected_slots(slots, n, self._take(need))
        assert got.tolist() == expected
        slots.extend(expected)

    @rule(data=st.data())
    def decode(self, data):
        """alloc_decode: a new page only for requests whose last page is full."""
        live = sorted(self.owned)
        if not live:
            return
        rids = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=4, unique=True))
        seq = [len(self.owned[r]) + 1 for r in rids]
        opens = [s % self.ps == 1 or self.ps == 1 for s in seq]
        got = self.allocator.alloc_decode(seq, [self.owned[r][-1] for r in rids])
        if sum(opens) > len(self.free_model):
            assert got is None
            return
        pages = iter(self._take(sum(opens)))
        for r, o, slot in zip(rids, opens, got.tolist(), strict=True):
            assert slot == (next(pages) * self.ps if o else self.owned[r][-1] + 1)
            self.owned[r].append(slot)

    @rule(rid=consumes(reqs))
    def free_request(self, rid):
        """Freed pages return in §3.3/§3.4 order; freeing them again raises, changing nothing."""
        if rid not in self.owned:
            return
        slots = self.owned.pop(rid)
        self.allocator.free(np.array(slots))
        if self.ps == 1:
            self.free_model += slots
        else:
            self.free_model = sorted({s // self.ps for s in slots}) + self.free_model
        before = self.allocator.backup_state()
        with pytest.raises(ValueError, match="twice"):
            self.allocator.free(np.array(slots))
        assert np.array_equal(self.allocator.backup_state().free_pages, before.free_pages)

    @rule(n_pages=st.integers(1, 4))
    def backup_alloc_restore(self, n_pages):
        """restore_state undoes an allocation exactly."""
        state = self.allocator.backup_state()
        self.allocator.alloc(n_pages * self.ps)
        self.allocator.restore_state(state)

    @rule()
    def freeing_page_zero_raises(self):
        """Page 0 is reserved: freeing it is refused."""
        with pytest.raises(ValueError, match="page 0"):
            self.allocator.free(np.array([0]))

    @invariant()
    def free_list_matches_model(self):
        """The allocator's free list is the model's, page for page and in order."""
        if hasattr(self, "allocator"):
            assert self.allocator.backup_state().free_pages.tolist() == self.free_model
            self.allocator.check_integrity()

    @invariant()
    def no_slot_owned_twice_and_pages_conserved(self):
        """Owned pages are disjoint, never page 0, and owned + free == all pages."""
        if not hasattr(self, "allocator"):
            return
        pages = [s // self.ps for slots in self.owned.values() for s in sorted(set(slots))]
        per_req = [{s // self.ps for s in slots} for slots in self.owned.values()]
        assert sum(len(p) for p in per_req) == len(set().union(*per_req))
        assert 0 not in set(pages)
        owned = len(set().union(*per_req)) if per_req else 0
        assert owned + len(self.free_model) == self.allocator.num_pages


AllocatorMachine.TestCase.settings = settings(max_examples=max(200, settings.default.max_examples))
TestAllocatorAgainstModel = AllocatorMachine.TestCase


def test_alloc_extend_writes_partial_page_tail_first():
    """§3.4: prefix 6 of page size 4 continues at last_loc+1 before a new page."""
    a = TokenToKVPoolAllocator(32, page_size=4)
    first = a.alloc_extend([0], [6], [-1])
    assert first.tolist() == [4, 5, 6, 7, 8, 9]
    assert a.alloc_extend([6], [11], [9]).tolist() == [10, 11, 12, 13, 14]


def test_misaligned_last_loc_is_refused():
    """alloc_extend rejects a last_loc that does not end at the prefix's page offset."""
    a = TokenToKVPoolAllocator(32, page_size=4)
    with pytest.raises(ValueError, match="page offset"):
        a.alloc_extend([6], [8], [4])


def test_failed_alloc_changes_nothing():
    """An allocation that does not fit returns None and leaves the free list as it was."""
    a = TokenToKVPoolAllocator(8, page_size=2)
    before = a.backup_state().free_pages.tolist()
    assert a.alloc_extend([0, 0], [6, 4], [-1, -1]) is None
    assert a.alloc(10) is None
    assert a.alloc_decode([1] * 5, [-1] * 5) is None
    assert a.backup_state().free_pages.tolist() == before


def test_free_listing_a_slot_twice_is_refused_whole():
    """With one slot per page, a free that lists a taken slot twice raises and frees nothing."""
    a = TokenToKVPoolAllocator(32, 1)
    slots = a.alloc(3)
    before = a.backup_state()
    with pytest.raises(ValueError, match="twice"):
        a.free(np.concatenate((slots, slots[-1:])))
    assert np.array_equal(a.backup_state().free_pages, before.free_pages)
    assert not a.is_free(slots).any()
    a.free(slots)
    assert a.is_free(slots).all()


@pytest.mark.parametrize("ps", [1, 4])
def test_the_free_list_keeps_its_order_across_the_ring_buffers_wrap(ps):
    """Take/free rounds on a 5-page pool wrap the ring buffer: FIFO reuse at page size 1,
    sorted pages to the front at page size > 1, exactly as a plain list gives them."""
    a, model = TokenToKVPoolAllocator(5 * ps, ps), list(range(1, 6))
    for n in (2, 3, 1, 4, 2, 5, 3, 1) * 3:
        pages = (a.alloc(n * ps)[::ps] // ps).tolist()
        assert pages == model[:n]
        model = model[n:]
        for part in (pages[::2], pages[1::2]):   # two frees, the pages in a shuffled order
            if part:
                a.free(np.concatenate([np.arange(p * ps, (p + 1) * ps) for p in part]))
                model = model + part if ps == 1 else sorted(part) + model
                assert a.backup_state().free_pages.tolist() == model
        a.check_integrity()


@settings(max_examples=60)
@given(ps=page_sizes, parts=st.lists(st.integers(1, 4), min_size=0, max_size=5),
       seed=st.integers(0, 2**16))
def test_freeing_parts_together_leaves_the_free_list_each_free_in_turn_leaves(ps, parts, seed):
    """free_each(parts) (one free at page size 1) gives the free list, slot for slot, that
    freeing the parts one after another gives; a slot listed twice is refused either way."""
    one, each = TokenToKVPoolAllocator(32 * ps, ps), TokenToKVPoolAllocator(32 * ps, ps)
    taken = one.alloc(sum(parts) * ps)
    assert np.array_equal(taken, each.alloc(sum(parts) * ps))
    pages = np.random.default_rng(seed).permutation(len(taken) // ps)
    slots = [np.concatenate([np.arange(p * ps, (p + 1) * ps) for p in taken[::ps][chunk] // ps])
             for chunk in np.split(pages, np.cumsum(parts)[:-1])] if parts else []
    one.free_each(slots)
    for part in slots:
        each.free(part)
    assert np.array_equal(one.backup_state().free_pages, each.backup_state().free_pages)
    if slots:
        with pytest.raises(ValueError):
            one.free_each([slots[0][:1], slots[0][:1]])
