"""KVMemory: whole request lifecycles (chunked prefill, decode, finish) conserve every
slot and row, with the radix cache and with it disabled (semantics §3.5, §4.4)."""

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import Req, SamplingParams
from shared.memory.kv_memory import KVCacheOOMError, KVMemory, MemoryLeakError
from shared.memory.radix_cache import RadixCache
from tests.strategies import page_sizes, prompts


def _owned_private_pages(mem, live):
    """Pages each live request owns outside the tree: [cache_protected_len, kv_allocated)."""
    table = mem.req_to_token_pool.req_to_token
    ps = mem.page_size
    return [set((table[r.req_pool_idx, r.cache_protected_len : r.kv_allocated_len] // ps).tolist())
            for r in live]


def _check_accounting(mem, live):
    """free + cached + privately owned == total; no page owned twice; no live slot free."""
    mem.check_integrity()
    private = _owned_private_pages(mem, live)
    assert sum(map(len, private)) == len(set().union(*private)), "a page owned by two requests"
    c = mem.tree_cache
    owned = len(set().union(*private)) * mem.page_size
    assert mem.allocator.available_size() + c.evictable_size() + c.protected_size() + owned \
        == mem.allocator.size
    table = mem.req_to_token_pool.req_to_token
    for r in live:
        assert not mem.allocator.is_free(table[r.req_pool_idx, : r.kv_allocated_len]).any()


def _prefill(mem, r, chunk, live):
    r.init_next_round_input(mem.tree_cache)
    mem.tree_cache.inc_lock_ref(r.last_node)
    while chunk and r.extend_input_len > chunk:
        r.fill_ids = r.fill_ids[: len(r.prefix_indices) + chunk]
        r.set_extend_input_len(chunk)
        mem.alloc_for_extend([r])
        r.kv_committed_len = r.kv_allocated_len = len(r.fill_ids)
        mem.tree_cache.cache_unfinished_req(r)
        _check_accounting(mem, live)
        r.init_next_round_input(None)
    mem.alloc_for_extend([r])
    r.kv_committed_len = r.kv_allocated_len = len(r.fill_ids)
    r.output_ids.append(7)
    mem.tree_cache.cache_unfinished_req(r)


@given(prompt_list=st.lists(prompts(max_len=20), min_size=1, max_size=5),
       ps=page_sizes, disable=st.booleans(), chunk=st.sampled_from([None, 3, 8]),
       decode_steps=st.integers(0, 6), order=st.randoms(use_true_random=False))
def test_request_lifecycles_conserve_slots_and_rows(prompt_list, ps, disable, chunk, decode_steps, order):
    """Prefill (chunked or not), decode and finish keep every slot accounted for, and the
    idle check passes afterwards."""
    mem = KVMemory.build(max_running_requests=5, max_context_len=32, max_total_tokens=512,
                         page_size=ps, disable_radix_cache=disable)
    live = []
    for i, prompt in enumerate(prompt_list):
        r = Req(f"r{i}", prompt, SamplingParams(max_new_tokens=decode_steps + 1))
        live.append(r)
        _prefill(mem, r, chunk, live)
        _check_accounting(mem, live)
    for _ in range(decode_steps):
        mem.alloc_for_decode([r.req_pool_idx for r in live], [r.kv_committed_len for r in live])
        for r in live:
            r.kv_committed_len += 1
            r.kv_allocated_len += 1
            r.output_ids.append(8)
        _check_accounting(mem, live)
    order.shuffle(live)
    while live:
        mem.release_kv_cache(live.pop())
        _check_accounting(mem, live)
    mem.check_idle()


def test_failed_extend_allocation_frees_its_rows():
    """An extend that does not fit raises KVCacheOOMError and leaves no row taken."""
    mem = KVMemory.build(max_running_requests=2, max_context_len=64, max_total_tokens=8)
    r = Req("big", list(range(20)))
    r.init_next_round_input(mem.tree_cache)
    with pytest.raises(KVCacheOOMError, match="out of KV memory"):
        mem.alloc_for_extend([r])
    assert r.req_pool_idx is None
    mem.check_idle()


def test_idle_check_reports_a_leaked_slot_and_row():
    """A request that is never released fails the idle check with a clear message."""
    mem = KVMemory.build(max_running_requests=2, max_context_len=64, max_total_tokens=64)
    r = Req("leak", [1, 2, 3])
    r.init_next_round_input(mem.tree_cache)
    mem.alloc_for_extend([r])
    with pytest.raises(MemoryLeakError, match="leak detected"):
        mem.check_idle()
    mem.allocator.free(mem.req_to_token_pool.req_to_token[r.req_pool_idx, :3])
    with pytest.raises(MemoryLeakError, match="row leak"):
        mem.check_idle()


def _tree_state(mem):
    c = mem.tree_cache
    nodes = sorted((x.node_id, tuple(x.key.tolist()), tuple(x.value.tolist()), x.last_access,
                    x.lock_ref, x.parent.node_id) for x in c._nodes())
    lru = sorted((t, x.node_id) for t, _, _, x in c._lru if t == x.last_access and x in c._evictable_leaves)
    return nodes, lru, c._tick, mem.allocator.backup_state().free_pages.tolist()


def _insert_from_the_root(cache, start, offset, key, value):
    """The reference for RadixCache._insert_after: one insert of the whole key from the root."""
    path = list(reversed(list(cache._path_to_root(start))))
    return cache.insert(np.concatenate([x.key for x in path] + [key]),
                        np.concatenate([x.value for x in path] + [value]))


@given(prompt_list=st.lists(prompts(max_len=20), min_size=1, max_size=5), ps=page_sizes,
       chunk=st.sampled_from([None, 3, 8]), decode_steps=st.integers(0, 6),
       seed=st.integers(0, 2**16))
def test_finishing_requests_cache_as_an_insert_from_the_root_would(prompt_list, ps, chunk,
                                                                    decode_steps, seed):
    """cache_finished_req walks on from the request's locked prefix; the tree (ticks, LRU
    order, splits) and the free list end as with one insert of the whole sequence."""
    states = []
    for reference in (False, True):
        with pytest.MonkeyPatch.context() as m:
            if reference:
                m.setattr(RadixCache, "_insert_after", _insert_from_the_root)
            mem = KVMemory.build(max_running_requests=5, max_context_len=32, max_total_tokens=512,
                                 page_size=ps)
            live = []
            for i, p in enumerate(prompt_list):
                live.append(Req(f"r{i}", p, SamplingParams(max_new_tokens=decode_steps + 1)))
                _prefill(mem, live[-1], chunk, live)
            for _ in range(decode_steps):
                mem.alloc_for_decode([r.req_pool_idx for r in live], [r.kv_committed_len for r in live])
                for r in live:
                    r.kv_committed_len += 1
                    r.kv_allocated_len += 1
                    r.output_ids.append(8 + r.kv_committed_len % 3)
            random.Random(seed).shuffle(live)
            trail = []
            while live:
                mem.release_kv_cache(live.pop())
                trail.append(_tree_state(mem))
            states.append(trail)
    assert states[0] == states[1]
