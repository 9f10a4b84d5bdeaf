"""A lean run (`Keep(trace=False)`: a RunLog, no step or request records kept) reports what
the full trace reports: the same requests and steps frames and the same summary, bit for bit,
wherever its chunks of steps are folded; past its exact limit the ITL percentiles are
sketched within SKETCH_ACCURACY; and it keeps nothing of a finished request but its row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.trace.log_result import result_from_log
from shared.trace.run_log import Keep
from shared.trace.run_result import bound_shares
from shared.trace.token_gaps import SKETCH_ACCURACY, GapSketch, exact_stats
from sim.model.embedded_configs import config_dict
from sim.run.build import build_simulation, model_info
from sim.run.driver import drive_workload
from sim.run.simulate import simulate
from tests.sketch_checks import assert_summary_matches_within_the_sketch
from tests.strategies import generator_workloads, small_engine_args

TINY = {**config_dict("smollm2-135m"), "vocab_size": 64}


def _info():
    from sim.run.build import load_model

    config, shape = load_model(TINY)
    return model_info(config, shape)


def _lean(workload, engine: dict, keep: Keep, slo=None):
    s = build_simulation(model=TINY, keep=keep, bounds=False, **engine)
    log = drive_workload(s.scheduler, s.runner, workload, finished_hook=s.token_source.finished)
    return result_from_log(log, slo), log


def _same_summary(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])), key


@settings(max_examples=max(60, settings.default.max_examples), deadline=None)
@given(data=st.data(), chunk=st.sampled_from((1, 2, 3, 7, 2048)),
       overlap=st.booleans(), keep_steps=st.booleans())
def test_a_lean_run_reports_exactly_what_its_full_trace_reports(data, chunk, overlap, keep_steps):
    workload = data.draw(generator_workloads(_info()))
    engine = {**data.draw(small_engine_args(workload)), "disable_overlap_schedule": not overlap,
              "disable_cuda_graph": True}
    full = simulate(workload, model=TINY, keep_trace=True, bounds=False, **engine)
    lean, log = _lean(workload, engine, Keep(trace=False, steps=keep_steps, chunk_steps=chunk))
    _same_summary(full.summary, lean.summary)
    pd.testing.assert_frame_equal(full.requests, lean.requests)
    if keep_steps:
        pd.testing.assert_frame_equal(full.steps, lean.steps)
    assert lean.num_steps == full.num_steps == len(full.trace)
    assert not log.requests.live, "a finished request's record outlived the run"
    for rid, record in full.trace.requests.items():
        row = lean.log.requests[rid]
        assert (row.finish_reason, row.output_len, row.num_retractions) == \
            (record.finish_reason, record.output_len, record.num_retractions)


def test_a_lean_run_keeps_no_steps_unless_asked_and_prices_their_bounds_when_kept():
    from shared import ShareGPTLike

    w = ShareGPTLike(60).build(vocab_size=128256, seed=1, rate=30)
    full = simulate(w, model="llama-3-8b", hardware="h100", keep_trace=True)
    lean = simulate(w, model="llama-3-8b", hardware="h100")
    kept = simulate(w, model="llama-3-8b", hardware="h100", keep_steps=True)
    assert lean.trace is None and len(lean.steps) == 0 and lean.num_steps == len(full.steps)
    assert list(lean.steps.columns) == list(full.steps.columns)
    pd.testing.assert_frame_equal(full.steps, kept.steps)
    assert set(kept.steps["bound"]) - {""}, "kept steps have their bounds priced"
    _same_summary(full.summary, lean.summary)
    assert lean.run_info.engine_config == full.trace.engine_config
    shares, want = bound_shares(lean), bound_shares(full)
    assert list(shares) == list(want) and want
    assert all(math.isclose(shares[k], want[k], rel_tol=1e-9) for k in want)


def test_past_the_exact_limit_itl_percentiles_are_within_the_sketch_accuracy():
    from shared import ShareGPTLike

    w = ShareGPTLike(120).build(vocab_size=128256, seed=3, rate=40)
    engine = {"hardware": "h100"}
    full = simulate(w, model="llama-3-8b", keep_trace=True, bounds=False, **engine)
    s = build_simulation(model="llama-3-8b", keep=Keep(trace=False, exact_gaps=500), **engine)
    log = drive_workload(s.scheduler, s.runner, w, finished_hook=s.token_source.finished)
    lean = result_from_log(log)
    assert log.gaps.sketch is not None, "the run passed its exact limit"
    assert_summary_matches_within_the_sketch(lean.summary, full.summary)


@given(st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e3)), min_size=1, max_size=300))
def test_a_sketched_percentile_is_within_its_relative_accuracy_of_the_exact_one(values):
    v = np.array(values)
    sketch = GapSketch()
    sketch.add(v[: len(v) // 2])
    sketch.add(v[len(v) // 2:])
    got, want = sketch.stats(), exact_stats(v)
    for key in want:
        if key == "itl_mean":
            assert math.isclose(got[key], want[key], rel_tol=1e-9, abs_tol=1e-15)
        else:
            assert abs(got[key] - want[key]) <= 1.001 * SKETCH_ACCURACY * want[key] + 1e-15, key
