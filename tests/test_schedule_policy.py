"""SchedulePolicy orders the waiting queue as SGLang's calc_priority does (semantics §5.1)."""

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.admission.schedule_policy import (
    IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD,
    LPM_MAX_WAITING,
    POLICIES,
    SchedulePolicy,
)
from shared.memory.kv_memory import KVMemory
from shared.request.req import Req
from shared.request.sampling_params import SamplingParams
from tests.strategies import prompts, small_page_sizes


def memory(cached=(), page_size=1, disable_radix_cache=False):
    """A KVMemory whose tree cache holds each prompt in `cached` (page-aligned part)."""
    mem = KVMemory.build(max_running_requests=4, max_context_len=512, max_total_tokens=4096,
                         page_size=page_size, disable_radix_cache=disable_radix_cache)
    for tokens in cached:
        slots = mem.allocator.alloc(len(tokens) // page_size * page_size)
        already = mem.tree_cache.insert(tokens, slots)
        mem.allocator.free(slots[:already])
    return mem


def req(rid, tokens, max_new_tokens=16):
    return Req(rid, list(tokens), SamplingParams(max_new_tokens=max_new_tokens))


def span(start, n):
    """n distinct tokens from `start` (distinct spans never share a first token)."""
    return list(range(start, start + n))


def rids(queue):
    return [r.rid for r in queue]


def ordered(policy, queue, mem=None, seed=0):
    """Run calc_priority; return (rids after, its return value)."""
    mem = mem or memory()
    computed = SchedulePolicy(policy, mem.tree_cache, random.Random(seed)).calc_priority(queue)
    return rids(queue), computed


def test_fcfs_keeps_arrival_order():
    """fcfs leaves the queue as it arrived and computes no prefix matches."""
    queue = [req(f"r{i}", span(100 * i, 5), max_new_tokens=i + 1) for i in range(5)]
    assert ordered("fcfs", queue) == (["r0", "r1", "r2", "r3", "r4"], False)


def test_lof_orders_by_decreasing_max_new_tokens_with_stable_ties():
    """lof puts the longest max_new_tokens first; equal ones keep arrival order."""
    budgets = {"a": 8, "b": 32, "c": 8, "d": 64, "e": 32}
    queue = [req(rid, [1, 2], n) for rid, n in budgets.items()]
    assert ordered("lof", queue) == (["d", "b", "e", "a", "c"], False)


def test_random_is_a_permutation_reproducible_from_the_seed():
    """random shuffles with the rng passed in: same seed, same order; global random unused."""
    def make():
        return [req(f"r{i}", [i]) for i in range(20)]

    random.seed(1)
    first, computed = ordered("random", make(), seed=7)
    random.seed(2)
    again, _ = ordered("random", make(), seed=7)
    other, _ = ordered("random", make(), seed=8)
    assert first == again != other
    assert sorted(first) == sorted(rids(make())) and computed is False


def test_unknown_policy_raises_naming_it():
    """An unknown policy name raises ValueError naming it."""
    with pytest.raises(ValueError, match="Unknown schedule_policy: 'shortest-job'"):
        SchedulePolicy("shortest-job", memory().tree_cache, random.Random(0))


@pytest.mark.parametrize("policy", POLICIES)
def test_policies_are_kept_with_a_radix_cache(policy):
    """With the radix cache enabled every policy runs as named."""
    assert SchedulePolicy(policy, memory().tree_cache, random.Random(0)).policy == policy


@pytest.mark.parametrize("policy", ["lpm", "dfs-weight"])
def test_cache_aware_policies_become_fcfs_with_chunk_cache(policy):
    """lpm and dfs-weight silently become fcfs when the radix cache is disabled."""
    mem = memory(disable_radix_cache=True)
    assert SchedulePolicy(policy, mem.tree_cache, random.Random(0)).policy == "fcfs"
    queue = [req("a", span(0, 3)), req("b", span(0, 50)), req("c", span(200, 3))]
    assert ordered(policy, queue, mem) == (["a", "b", "c"], False)


def test_lpm_orders_by_longest_cached_prefix():
    """lpm sorts by decreasing real-tree match (stable ties) and records each match."""
    mem = memory(cached=[span(0, 100), span(1000, 10)])
    queue = [req("none", span(5000, 8)), req("ten", [*span(1000, 10), 7]),
             req("sixty", [*span(0, 60), 9]), req("sixty_b", [*span(0, 60), 8]),
             req("all", span(0, 100))]
    assert ordered("lpm", queue, mem) == (["all", "sixty", "sixty_b", "ten", "none"], True)
    assert [len(r.prefix_indices) for r in queue] == [100, 60, 60, 10, 0]
    assert all(r.last_node is not None for r in queue)
    mem.check_integrity()


def test_lpm_defers_requests_sharing_a_new_prefix_in_the_batch():
    """Of several waiting requests sharing a new 40-token prefix, only the first keeps its
    place; the others go behind requests with no shared prefix."""
    shared = span(500, 40)
    queue = [req("s0", [*shared, 1]), req("s1", [*shared, 2]), req("u0", span(2000, 50)),
             req("s2", [*shared, 3]), req("u1", span(3000, 50))]
    assert ordered("lpm", queue, memory()) == (["s0", "u0", "u1", "s1", "s2"], True)


@pytest.mark.parametrize(("shared_len", "deferred"), [(31, False), (32, True)])
def test_lpm_in_batch_dedup_needs_a_32_token_shared_prefix(shared_len, deferred):
    """A request is deferred only when it shares >= 32 tokens with an earlier waiting one."""
    shared = span(500, shared_len)
    queue = [req("a", [*shared, 1]), req("b", [*shared, 2]), req("u", span(2000, 40))]
    expected = ["a", "u", "b"] if deferred else ["a", "b", "u"]
    assert ordered("lpm", queue, memory()) == (expected, True)


@pytest.mark.parametrize(("cached_len", "checked"), [(32, True), (33, False)])
def test_lpm_in_batch_dedup_only_checks_short_real_matches(cached_len, checked):
    """In-batch dedup applies only when the real-tree match is <= 32 tokens."""
    assert IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD == 32
    cached = span(0, cached_len)
    mem = memory(cached=[cached])
    queue = [req("a", cached + span(700, 10)), req("b", cached + span(800, 10)),
             req("u", span(2000, 40))]
    expected = ["a", "u", "b"] if checked else ["a", "b", "u"]
    assert ordered("lpm", queue, mem) == (expected, True)


@pytest.mark.parametrize("n", [LPM_MAX_WAITING, LPM_MAX_WAITING + 1])
def test_lpm_falls_back_to_fcfs_above_128_waiting(n):
    """With more than 128 waiting requests lpm neither matches nor sorts for that call."""
    mem = memory(cached=[span(0, 20)])
    queue = [req(f"r{i}", span(1000 + 10 * i, 5)) for i in range(n - 1)]
    queue.append(req("hit", [*span(0, 20), 5]))
    got, computed = ordered("lpm", queue, mem)
    if n > LPM_MAX_WAITING:
        assert (got[-1], computed, len(queue[-1].prefix_indices)) == ("hit", False, 0)
    else:
        assert (got[0], computed, len(queue[0].prefix_indices)) == ("hit", True, 20)


def test_dfs_weight_groups_subtrees_deeper_matches_first():
    """dfs-weight visits the heaviest subtree first, deeper matches before their ancestors',
    and requests matching nothing last."""
    a, b1, b2, c = span(0, 20), span(100, 10), span(200, 10), span(300, 20)
    mem = memory(cached=[c, a + b2, a + b1])  # older nodes are the lighter ones
    queue = [req("c", [*c, 9]), req("a", [*a, 9]), req("ab1", a + b1 + [9]),
             req("none", span(900, 5)), req("ab2", a + b2 + [9]), req("ab1_2", a + b1 + [8])]
    assert ordered("dfs-weight", queue, mem) == (["ab1", "ab1_2", "ab2", "a", "c", "none"], True)
    mem.check_integrity()


def test_dfs_weight_breaks_weight_ties_by_the_childrens_insertion_order():
    """Subtrees of equal weight are visited in the order their first page joined the parent,
    whatever the arrival order (SGLang sorts the children dict stably by weight)."""
    mem = memory(cached=[span(0, 10), span(100, 10)])
    queue = [req("young", [*span(100, 10), 1]), req("old", [*span(0, 10), 1])]
    assert ordered("dfs-weight", queue, mem) == (["old", "young"], True)


def test_dfs_weight_keeps_a_split_node_in_its_place_among_the_children():
    """A match that splits the older child makes a new upper node (a newer node id), which
    keeps the child's place in the parent's children: it is still visited first on a tie."""
    mem = memory(cached=[span(0, 20), span(100, 10)])
    queue = [req("b", [*span(100, 10), 1]), req("a", [*span(0, 10), 1])]
    assert ordered("dfs-weight", queue, mem) == (["a", "b"], True)


def test_dfs_weight_counts_a_split_node_once():
    """A match that splits a cached node still lands each request in its own subtree."""
    mem = memory(cached=[span(0, 30)])
    queue = [req("short", [*span(0, 10), 99]), req("long", [*span(0, 30), 1]),
             req("long_b", [*span(0, 30), 2])]
    assert ordered("dfs-weight", queue, mem) == (["long", "long_b", "short"], True)
    mem.check_integrity()


@st.composite
def waiting_queues(draw):
    """Prompts built from a few shared stems (long enough to trip the 32-token dedup)."""
    stems = draw(st.lists(st.lists(st.integers(0, 2), max_size=40), min_size=1, max_size=3))
    parts = st.tuples(st.sampled_from(stems), prompts(max_len=6))
    return [stem + tail for stem, tail in draw(st.lists(parts, max_size=12))]


@given(policy=st.sampled_from(POLICIES), queue_prompts=waiting_queues(),
       cached=st.lists(prompts(max_len=48), max_size=4), page_size=small_page_sizes,
       disable=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_every_policy_returns_a_permutation_of_the_queue(policy, queue_prompts, cached,
                                                         page_size, disable, seed):
    """calc_priority reorders the same Req objects, each exactly once, and keeps the cache sound."""
    mem = memory(cached, page_size, disable)
    queue = [req(f"r{i}", p, max_new_tokens=1 + i % 3) for i, p in enumerate(queue_prompts)]
    before = list(queue)
    sp = SchedulePolicy(policy, mem.tree_cache, random.Random(seed))
    computed = sp.calc_priority(queue)
    assert sorted(map(id, queue)) == sorted(map(id, before)) and len(queue) == len(before)
    assert computed == (sp.policy in ("lpm", "dfs-weight"))
    if computed:
        for r in queue:
            key = r.origin_input_ids + r.output_ids
            assert np.array_equal(r.prefix_indices, mem.tree_cache.match_prefix(key).device_indices)
    mem.check_integrity()
