"""`sim.run.simulate`: determinism, metrics, the trace header, engine config and bad input."""

import json
import math

import numpy as np
import pandas as pd
import pytest

import sim
from shared import EngineConfig, ShareGPTLike, Trace, Workload, cuda_graph_batch_sizes
from sim.cost.base import ZeroCostModel
from sim.cost.calibrated import FEATURES, CalibratedCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import embedded_configs, get_model_shape
from sim.model.kv_capacity import kv_capacity_tokens

VOCAB = 49152  # smollm2-135m
SMALL = {"model": "smollm2-135m", "hardware": "h100"}


def _workload(seed=0, n=24, rate=100.0):
    return ShareGPTLike(n, prompt_median=64, output_median=16, max_len=256).build(vocab_size=VOCAB,
                                                                                  seed=seed,
                                                                                  rate=rate)


def test_same_workload_and_seed_give_identical_frames():
    """Two runs of one workload and seed give equal request and step DataFrames."""
    a = sim.simulate(_workload(), seed=3, **SMALL, keep_trace=True)
    b = sim.simulate(_workload(), seed=3, **SMALL, keep_trace=True)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert [s.next_token_ids for s in a.trace.steps] == [s.next_token_ids for s in b.trace.steps]


def test_different_workload_seed_gives_different_arrivals():
    """Another workload seed changes the arrivals (and so the run)."""
    a = sim.simulate(_workload(seed=0), **SMALL, keep_trace=True)
    b = sim.simulate(_workload(seed=1), **SMALL, keep_trace=True)
    assert not np.array_equal(a.requests["arrival"], b.requests["arrival"])


def test_token_seed_changes_tokens_not_schedule():
    """With ignore_eos workloads the token seed changes the ids, never the schedule."""
    a = sim.simulate(_workload(), seed=0, **SMALL, keep_trace=True).trace
    b = sim.simulate(_workload(), seed=1, **SMALL, keep_trace=True).trace
    assert [s.rids for s in a.steps] == [s.rids for s in b.steps]
    assert [s.next_token_ids for s in a.steps] != [s.next_token_ids for s in b.steps]


def test_ttft_is_first_token_time_minus_arrival():
    """TTFT = the end of the step that sampled the request's first token - its arrival."""
    result = sim.simulate(_workload(), **SMALL, keep_trace=True)
    first_end = {}
    for s in result.trace.steps:
        for rid, tok in zip(s.rids, s.next_token_ids, strict=True):
            if tok != -1:
                first_end.setdefault(rid, s.start_time + s.duration)
    for row in result.requests.itertuples():
        assert row.ttft == pytest.approx(first_end[row.rid] - row.arrival, abs=1e-12)
        assert row.ttft > 0
    assert result.summary["ttft_mean"] == pytest.approx(result.requests["ttft"].mean())


def test_every_request_completes_with_its_workload_output_length():
    """Synthetic tokens never stop a request early: output length = max_new_tokens."""
    workload = _workload()
    result = sim.simulate(workload, **SMALL, keep_trace=True)
    want = {r.rid: r.sampling_params.max_new_tokens for r in workload}
    assert dict(zip(result.requests["rid"], result.requests["output_len"], strict=True)) == want
    assert result.summary["completed"] == len(workload)


def test_trace_header_records_model_config_and_executor(tmp_path):
    """The header names the model config, the sim executor, hardware, tp and cost model, and
    survives a save/load."""
    result = sim.simulate(_workload(n=4), **SMALL, keep_trace=True)
    path = tmp_path / "t.jsonl"
    result.trace.save(path)
    trace = Trace.load(path)
    assert trace.model_config == json.loads(json.dumps(embedded_configs()["smollm2-135m"]))
    assert trace.executor == {"kind": "sim", "hardware": "h100", "tp": 1,
                              "cost_model": "kernel(smollm2-135m, h100, tp=1)"}
    assert trace.model_info.vocab_size == VOCAB
    assert trace.model_info.context_length == 8192


def test_max_total_tokens_defaults_to_the_kv_capacity_estimate():
    """Unless given, the KV pool holds what kv_capacity_tokens estimates beside the weights."""
    shape, hw = get_model_shape("llama-3-8b"), get_hardware("h100")
    s = sim.build_simulation(model="llama-3-8b", hardware="h100")
    assert s.scheduler.config.max_total_tokens == kv_capacity_tokens(shape, hw)
    s = sim.build_simulation(model="llama-3-8b", max_total_tokens=5000)
    assert s.scheduler.config.max_total_tokens == 5000


def test_graph_decision_follows_the_engine_config():
    """Decode steps replay a graph at the smallest captured size >= batch size; none when
    graphs are disabled; prefills never."""
    result = sim.simulate(_workload(rate=math.inf), cuda_graph_max_bs=8, **SMALL, keep_trace=True)
    sizes = cuda_graph_batch_sizes(result.trace.engine_config)
    for s in result.trace.steps:
        graph = s.forward_mode == "DECODE" and len(s.rids) <= 8
        assert s.graph == graph
        assert s.padded_batch_size == (min(b for b in sizes if b >= len(s.rids)) if graph
                                       else len(s.rids))
    off = sim.simulate(_workload(rate=math.inf), disable_cuda_graph=True, **SMALL, keep_trace=True)
    assert not any(s.graph for s in off.trace.steps)


def test_cost_model_object_and_calibrated_path_are_used(tmp_path):
    """A CostModel object prices the steps; a path loads a calibrated JSON."""
    zero = sim.simulate(_workload(n=4), cost_model=ZeroCostModel(), **SMALL, keep_trace=True)
    assert (zero.steps["duration"] == 0).all()
    assert zero.trace.executor["cost_model"] == "zero"
    calibrated = CalibratedCostModel(tuple(1e-3 if f == "constant" else 0.0 for f in FEATURES),
                                     source="test")
    path = tmp_path / "cal.json"
    calibrated.save(path)
    result = sim.simulate(_workload(n=4), cost_model=str(path), **SMALL, keep_trace=True)
    assert np.allclose(result.steps["duration"], 1e-3)
    assert result.trace.executor["cost_model"] == "calibrated(test)"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"model": "llama-9"}, "known keys: .*llama-3-8b"),
    ({"hardware": "h999"}, "known keys: .*h100"),
    ({"tp": 2}, "tp=2"),
    ({"cost_model": "/nonexistent/cal.json"}, "does not exist"),
    ({"max_total_tokens": 0}, "max_total_tokens"),
])
def test_bad_arguments_raise_clear_value_errors(kwargs, match):
    """Unknown model or hardware keys list the known ones; other bad values name themselves."""
    with pytest.raises(ValueError, match=match):
        sim.simulate(_workload(n=2), **{**SMALL, **kwargs}, keep_trace=True)


def test_unknown_engine_argument_is_a_type_error():
    """engine_args must be EngineConfig fields."""
    with pytest.raises(TypeError, match="unknown engine argument"):
        sim.simulate(_workload(n=2), max_batch=4, **SMALL, keep_trace=True)


def test_empty_workload_and_negative_rate_are_refused():
    """An empty workload and a negative rate raise ValueError before anything runs."""
    with pytest.raises(ValueError, match="no requests"):
        sim.simulate(Workload(()), **SMALL, keep_trace=True)
    with pytest.raises(ValueError, match="rate must be > 0"):
        ShareGPTLike(4).build(vocab_size=VOCAB, rate=-1.0)


def test_engine_config_is_resolved_from_the_model():
    """The effective config takes its context length from max_position_embeddings."""
    result = sim.simulate(_workload(n=2), **SMALL, keep_trace=True)
    assert result.trace.engine_config == EngineConfig(
        max_total_tokens=result.trace.engine_config.max_total_tokens).resolve(
        result.trace.model_info)


def test_malformed_trace_lines_raise_value_errors(tmp_path):
    """Trace.load on a broken file raises ValueError (not a silent partial trace)."""
    good = tmp_path / "good.jsonl"
    sim.simulate(_workload(n=2), **SMALL, keep_trace=True).trace.save(good)
    lines = good.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([lines[0], lines[1][: len(lines[1]) // 2], *lines[2:]]) + "\n")
    with pytest.raises(ValueError):
        Trace.load(broken)
    not_a_trace = tmp_path / "other.jsonl"
    not_a_trace.write_text('{"format": "something-else"}\n')
    with pytest.raises(ValueError, match="not a batchtwin-trace"):
        Trace.load(not_a_trace)


def test_malformed_trace_errors_name_the_file_and_line(tmp_path):
    """A step line missing a field raises ValueError naming the file and its line number."""
    good = tmp_path / "good.jsonl"
    sim.simulate(_workload(n=2), **SMALL, keep_trace=True).trace.save(good)
    header, step, *rest = good.read_text().splitlines()
    record = json.loads(step)
    del record["seq_lens"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([header, json.dumps(record), *rest]) + "\n")
    with pytest.raises(ValueError, match=r"broken\.jsonl.*line 2"):
        Trace.load(broken)
