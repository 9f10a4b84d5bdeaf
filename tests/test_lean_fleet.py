"""A lean fleet (`Keep(trace=False)`: one RunLog per replica) reports what the full-trace fleet
reports: the same requests, steps, replicas table and summary, ITL included, bit for bit,
behind every router; past a replica's exact ITL limit the pooled percentiles are sketched
within SKETCH_ACCURACY; and sketches pool as the values they counted."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import ShareGPTLike
from shared.trace.run_log import Keep, RunLog
from shared.trace.token_gaps import SKETCH_ACCURACY, GapSketch, exact_stats, pool_gaps
from sim.fleet.fleet_layout import Fleet
from sim.model.embedded_configs import config_dict
from sim.routers import ROUTERS
from sim.run.build import load_model, model_info
from sim.run.deployment import Deployment
from tests.sketch_checks import assert_summary_matches_within_the_sketch
from tests.strategies import generator_workloads, small_engine_args

TINY = {**config_dict("smollm2-135m"), "vocab_size": 64}


def _same_summary(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])), key


def _same_results(full, lean, keep_steps: bool) -> None:
    pd.testing.assert_frame_equal(full.requests, lean.requests)
    pd.testing.assert_frame_equal(full.replicas, lean.replicas)
    _same_summary(full.summary, lean.summary)
    if keep_steps:
        pd.testing.assert_frame_equal(full.steps, lean.steps)
    assert lean.num_steps == full.num_steps
    assert all(isinstance(t, RunLog) and not t.requests.live for t in lean.traces)


@pytest.mark.parametrize("router", sorted(ROUTERS))
@settings(max_examples=max(25, settings.default.max_examples), deadline=None)
@given(data=st.data(), replicas=st.integers(1, 3), chunk=st.sampled_from((1, 3, 2048)),
       overlap=st.booleans(), keep_steps=st.booleans())
def test_a_lean_fleet_reports_exactly_what_its_full_trace_fleet_reports(
        router, data, replicas, chunk, overlap, keep_steps):
    workload = data.draw(generator_workloads(model_info(*load_model(TINY))))
    engine = {**data.draw(small_engine_args(workload)), "disable_overlap_schedule": not overlap,
              "disable_cuda_graph": True}
    deployment = Deployment.from_keywords(model=TINY, **engine)
    fleet = Fleet(replicas, router)
    full = fleet.run(workload, deployment, bounds=False)
    lean = fleet.run(workload, deployment, bounds=False,
                     keep=Keep(trace=False, steps=keep_steps, chunk_steps=chunk))
    _same_results(full, lean, keep_steps)
    for i in range(replicas):   # each replica's own result, read from its log
        own, want = lean.part_result("replica", i), full.part_result("replica", i)
        pd.testing.assert_frame_equal(want.requests, own.requests)
        _same_summary(want.summary, own.summary)


def test_a_lean_fleet_prices_its_steps_bounds_as_the_full_fleet():
    w = ShareGPTLike(60).build(vocab_size=128256, seed=1, rate=30)
    deployment = Deployment.from_keywords(model="llama-3-8b", hardware="h100")
    fleet = Fleet(3, "cache_aware")
    full = fleet.run(w, deployment)
    lean = fleet.run(w, deployment, keep=Keep(trace=False, steps=True))
    _same_results(full, lean, keep_steps=True)
    assert set(lean.steps["bound"]) - {""}, "kept steps have their bounds priced"


def test_past_the_exact_limit_a_fleets_itl_percentiles_are_within_the_sketch_accuracy():
    w = ShareGPTLike(120).build(vocab_size=128256, seed=3, rate=40)
    deployment = Deployment.from_keywords(model="llama-3-8b", hardware="h100")
    fleet = Fleet(3, "least_load")
    full = fleet.run(w, deployment, bounds=False)
    lean = fleet.run(w, deployment, bounds=False, keep=Keep(trace=False, exact_gaps=300))
    assert all(t.gaps.sketch is not None for t in lean.traces), "every replica sketched"
    assert_summary_matches_within_the_sketch(lean.summary, full.summary)


values_lists = st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e3)), max_size=200)


@given(parts=st.lists(values_lists, min_size=1, max_size=4), exact=st.lists(st.booleans(), min_size=4,
                                                                           max_size=4))
def test_pooled_sketches_count_what_one_sketch_of_all_their_values_counts(parts, exact):
    """Exact parts concatenate in order; with any sketch among them, the pool is one sketch
    with the counts (hence percentiles) of a sketch of every value."""
    arrays = [np.array(p, dtype=float) for p in parts]
    pools = []
    for a, keep_exact in zip(arrays, exact, strict=False):
        sketch = GapSketch()
        sketch.add(a)
        pools.append(a if keep_exact else sketch)
    pooled = pool_gaps(pools)
    values = np.concatenate(arrays)
    if all(isinstance(p, np.ndarray) for p in pools):
        assert np.array_equal(pooled, values)
        return
    one = GapSketch()
    one.add(values)
    assert (pooled.count, pooled.zeros) == (one.count, one.zeros)
    if not values.size:
        assert all(math.isnan(v) for v in pooled.stats().values())
        return
    got, want, exact_p = pooled.stats(), one.stats(), exact_stats(values)
    assert math.isclose(got["itl_mean"], want["itl_mean"], rel_tol=1e-9, abs_tol=1e-15)
    for key in ("itl_p50", "itl_p90", "itl_p99"):
        assert got[key] == want[key], key
        assert abs(got[key] - exact_p[key]) <= 1.001 * SKETCH_ACCURACY * exact_p[key] + 1e-15


def test_a_lean_fleet_writes_each_replicas_trace_file_as_the_full_fleet_saves_it(tmp_path):
    w = ShareGPTLike(40).build(vocab_size=128256, seed=2, rate=40)
    deployment = Deployment.from_keywords(model="llama-3-8b", hardware="h100")
    fleet = Fleet(2, "least_load")
    fleet.run(w, deployment, keep=Keep(trace=False, trace_file=tmp_path / "lean.jsonl"))
    fleet.run(w, deployment, keep=Keep(trace_file=tmp_path / "full.jsonl"))
    for i in range(2):
        lean, full = (tmp_path / f"{name}-{i}.jsonl" for name in ("lean", "full"))
        assert lean.read_bytes() == full.read_bytes(), i
