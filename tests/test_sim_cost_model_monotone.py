"""Both cost models (roofline and kernel) price a forward that does all of another's work and
more at no less: one more new token, cached-prefix token or KV token, or one more request,
for every embedded model, catalogue chip and tp the model shards (defaults: no EP, no
attention DP); every step finite and positive. And the kernel model's causal prefill
attention (`sim.cost.kernel.prefill_attention`): a tile's pairs, the longest tile as a lower bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.base import CostModel
from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.model import KernelCostModel
from sim.cost.kernel.prefill_attention import query_tile_pairs, tiled_makespan
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from tests.strategies import batch_growths, cost_model_keys

KINDS = {"roofline": RooflineCostModel, "kernel": KernelCostModel}
KEYS = cost_model_keys()


def _model(kind: str, model: str, chip: str, tp: int) -> CostModel:
    return KINDS[kind](get_model_shape(model), get_hardware(chip), tp)


def _check_grows(model: CostModel, before: BatchShape, after: BatchShape) -> None:
    for overlap in (False, True):
        t0, t1 = model.step_time(before, overlap), model.step_time(after, overlap)
        assert math.isfinite(t0) and t0 > 0 and math.isfinite(t1) and t1 > 0
        assert t1 >= t0, (overlap, t0, t1)


@settings(max_examples=max(200, settings.default.max_examples))
@given(kind=st.sampled_from(sorted(KINDS)), key=st.sampled_from(KEYS), growth=batch_growths())
def test_step_time_never_falls_when_a_batch_gains_work(kind, key, growth):
    _, before, after = growth
    _check_grows(_model(kind, *key), before, after)


def _extend(*reqs: tuple[int, int]) -> BatchShape:
    """An extend batch of (cached prefix, new tokens) requests."""
    return BatchShape.build("EXTEND", [p + e for p, e in reqs], [p for p, _ in reqs])


# NOTE: the defect's examples (a 129-token prefill, sixteen 1-token requests beside a 256-token
# one) and a decode batch crossing the CUDA-graph limit (160 rows), for every combination.
FIXED_GROWTHS = (
    (_extend((0, 128)), _extend((0, 129))),
    (_extend((0, 256)), _extend((0, 256), *[(0, 1)] * 16)),
    (_extend((0, 1024)), _extend((0, 1024), (0, 1))),
    (_extend((4000, 300)), _extend((4001, 300))),
    (BatchShape.build("DECODE", [900] * 160), BatchShape.build("DECODE", [900] * 161)),
)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_model_chip_and_tp_prices_more_work_at_no_less(kind):
    for key in KEYS:
        model = _model(kind, *key)
        for before, after in FIXED_GROWTHS:
            _check_grows(model, before, after)


def test_a_query_tile_scores_its_rows_causal_pairs():
    """Rows 0-127 after 10 cached tokens score 11..138 keys; row 128 scores 139."""
    assert query_tile_pairs([10, 0], [129, 2]) == [sum(range(11, 139)), 139, 1 + 2]


def test_the_longest_tile_bounds_the_makespan_below():
    """One head of a 129-token prefill: the first tile's 8256 pairs on one SM, though the
    132 SMs could share 8385 pairs in 64 each."""
    assert tiled_makespan(query_tile_pairs([0], [129]), 1, 132) == 128 * 129 // 2


def test_equal_tiles_take_whole_waves_of_the_sms():
    """133 equal units (19 tiles x 7 heads) take two waves of 132 SMs, one of 133."""
    assert tiled_makespan([7] * 133, 1, 132) == 14
    assert tiled_makespan([7] * 19, 7, 132) == 14
    assert tiled_makespan([7] * 19, 7, 133) == 7


def test_many_unequal_tiles_take_their_total_over_the_sms():
    """32 heads x 16 tiles of a 2048-token prefill: the work spreads over 132 SMs."""
    tiles = query_tile_pairs([0], [2048])
    assert tiled_makespan(tiles, 32, 132) == pytest.approx(32 * sum(tiles) / 132)
