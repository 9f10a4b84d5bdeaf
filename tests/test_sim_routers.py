"""Each routing policy's choice, against a fleet view with loads set by hand."""

from __future__ import annotations

from shared import SamplingParams
from shared.loop.scheduler_load import SchedulerLoad
from shared.workload.workload import WorkloadRequest
from sim.routers import make_router
from sim.routers.prefix_blocks import PrefixBlocks, block_chain


class _View:
    def __init__(self, *loads: SchedulerLoad) -> None:
        self.loads = list(loads)

    @property
    def num_replicas(self) -> int:
        return len(self.loads)

    def load(self, replica: int) -> SchedulerLoad:
        return self.loads[replica]


def _req(tokens, rid="r") -> WorkloadRequest:
    return WorkloadRequest(rid, 0.0, tuple(tokens), SamplingParams(max_new_tokens=4))


IDLE = SchedulerLoad()


def test_least_load_takes_the_fewest_running_plus_queued_tokens():
    view = _View(SchedulerLoad(2, 0, 900, 0), SchedulerLoad(1, 3, 100, 700),
                 SchedulerLoad(5, 0, 600, 100))
    assert make_router("least_load", 3).route(_req([1]), view) == 2


def test_power_of_two_takes_the_lighter_of_its_two_draws():
    """Over many draws it never picks the heaviest replica of three, and picks each of the
    other two (the lightest always when drawn)."""
    view = _View(SchedulerLoad(0, 0, 10, 0), SchedulerLoad(0, 0, 50, 0),
                 SchedulerLoad(0, 0, 99, 0))
    router = make_router("power_of_two", 3, seed=0)
    picks = [router.route(_req([1]), view) for _ in range(200)]
    assert set(picks) == {0, 1}
    assert 110 < picks.count(0) < 160   # P(0 drawn) = 2/3


def test_cache_aware_follows_a_shared_prefix_to_its_replica():
    """A prompt sharing 3 of its 4 blocks with one sent to replica 1 goes there."""
    router = make_router("cache_aware", 3)
    system = list(range(96))
    router.route(_req([500] * 64), _View(IDLE, IDLE, IDLE))             # -> replica 0
    assert router.route(_req(system + [7] * 32), _View(IDLE, IDLE, IDLE)) == 1
    assert router.route(_req(system + [9] * 32), _View(IDLE, IDLE, IDLE)) == 1


def test_cache_aware_sends_an_unmatched_prompt_to_the_smallest_tree():
    router = make_router("cache_aware", 2)
    router.route(_req(list(range(256))), _View(IDLE, IDLE))            # replica 0: 8 blocks
    assert router.route(_req([3] * 64), _View(IDLE, IDLE)) == 1


def test_cache_aware_balances_load_past_both_thresholds():
    """100 vs 10 requests (difference > 64, ratio > 1.5): least loaded, prefix or not; 100
    vs 40 (difference 60 <= 64): the prefix wins."""
    router = make_router("cache_aware", 2)
    prompt = list(range(128))
    router.route(_req(prompt), _View(IDLE, IDLE))                      # replica 0
    busy = SchedulerLoad(100, 0, 0, 0)
    assert router.route(_req(prompt), _View(busy, SchedulerLoad(10, 0, 0, 0))) == 1
    assert router.route(_req(prompt), _View(busy, SchedulerLoad(40, 0, 0, 0))) == 0


def test_prefix_blocks_match_whole_leading_blocks_only():
    """Keys chain: a block matches only after every block before it matched."""
    tree = PrefixBlocks(4)
    tree.insert(block_chain([1, 2, 3, 4, 5, 6, 7, 8], 4))
    assert tree.matched_tokens(block_chain([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)) == 8
    assert tree.matched_tokens(block_chain([1, 2, 3, 4, 0, 6, 7, 8], 4)) == 4
    assert tree.matched_tokens(block_chain([0, 2, 3, 4, 5, 6, 7, 8], 4)) == 0
    assert tree.size_tokens == 8
