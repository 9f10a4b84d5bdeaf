"""The simulator's front door: `simulate(workload, deployment, layout)`, the `Deployment` of one
engine instance, the cost-model registry and the RunResult of a layout of several engines."""

import dataclasses

import pytest

import sim
from shared import ShareGPTLike
from sim.cost.registry import COST_MODELS, CostInputs, build_cost_model
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape

VOCAB = 49152  # smollm2-135m
SMALL = sim.Deployment(model="smollm2-135m", hardware="h100")


def _workload(n=16, seed=0):
    return ShareGPTLike(n, prompt_median=64, output_median=8, max_len=256).build(
        vocab_size=VOCAB, seed=seed, rate=200.0)


def _steps(result):
    return [dataclasses.astuple(s) for t in result.traces for s in t.steps]


def test_a_deployment_and_its_flat_keywords_run_the_same_simulation():
    """simulate(w, Deployment(...)) and simulate(w, **keywords) give identical steps and
    request outcomes, the EngineConfig keywords landing in `engine`."""
    dep = dataclasses.replace(SMALL, cost_model="kernel", engine={"chunked_prefill_size": 64})
    a = sim.simulate(_workload(), dep, keep_trace=True)
    b = sim.simulate(_workload(), model="smollm2-135m", hardware="h100", cost_model="kernel",
                     chunked_prefill_size=64, keep_trace=True)
    assert _steps(a) == _steps(b)
    assert a.summary == b.summary
    assert b.trace.engine_config.chunked_prefill_size == 64


def test_from_keywords_splits_deployment_fields_from_engine_fields():
    d = sim.Deployment.from_keywords(model="qwen3-8b", tp=2, page_size=16, schedule_policy="lpm")
    assert (d.model, d.tp) == ("qwen3-8b", 2)
    assert dict(d.engine) == {"page_size": 16, "schedule_policy": "lpm"}


def test_an_unknown_engine_field_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"unknown engine argument.*max_batch"):
        sim.Deployment(engine={"max_batch": 4})
    with pytest.raises(TypeError, match="max_batch"):
        sim.simulate(_workload(n=2), model="smollm2-135m", max_batch=4, keep_trace=True)


def test_a_deployment_and_keywords_together_are_refused():
    with pytest.raises(TypeError, match="not both"):
        sim.simulate(_workload(n=2), SMALL, tp=2, keep_trace=True)


def test_deployments_compare_and_hash_by_value():
    a = sim.Deployment(model="llama-3-8b", engine={"page_size": 16})
    b = sim.Deployment.from_keywords(model="llama-3-8b", page_size=16)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != a.replace(engine_changes={"page_size": 32})


def test_the_engine_profile_sets_the_schedule_unless_the_engine_fields_do():
    assert not sim.Deployment(engine_profile="vllm").engine_config().overlap
    explicit = sim.Deployment(engine_profile="vllm", engine={"disable_overlap_schedule": False})
    assert explicit.engine_config().overlap


@pytest.mark.parametrize("name", sorted(COST_MODELS))
def test_every_registered_cost_model_builds_and_describes_itself(name):
    """A COST_MODELS row builds a CostModel from CostInputs whose describe() names it, and
    the trace header carries that description."""
    inputs = CostInputs(get_model_shape("smollm2-135m"), get_hardware("h100"))
    model = build_cost_model(name, inputs)
    assert model.describe().startswith(f"{name}(smollm2-135m, h100, tp=1")
    result = sim.simulate(_workload(n=4), dataclasses.replace(SMALL, cost_model=name), keep_trace=True)
    assert result.trace.executor["cost_model"] == model.describe()


def test_an_unknown_cost_model_is_refused_listing_the_registered_ones():
    inputs = CostInputs(get_model_shape("smollm2-135m"), get_hardware("h100"))
    with pytest.raises(ValueError, match="'roofline' or 'kernel'"):
        build_cost_model("no-such-model", inputs)


def test_a_fleet_is_a_run_result_with_one_part_per_replica():
    """Fleet(3): one RunResult whose parts are the replicas, each part_result its own run,
    the request rows partitioned among them."""
    result = sim.simulate(_workload(n=24), SMALL, sim.Fleet(3, "round_robin"), keep_trace=True)
    assert [(p.role, p.index) for p in result.parts] == [("replica", i) for i in range(3)]
    assert len(result.traces) == 3 and result.trace is None
    per_part = [len(result.part_result("replica", i).requests) for i in range(3)]
    assert per_part == [8, 8, 8] and len(result.requests) == sum(per_part)
    assert len(result.completed_requests) == result.summary["completed"]
    with pytest.raises(KeyError, match="no decode 0"):
        result.part_result("decode")


def test_a_disaggregated_run_names_its_prefill_and_decode_parts():
    result = sim.simulate(_workload(n=8), SMALL, sim.Disaggregated(prefill=2, decode=1), keep_trace=True)
    assert [(p.role, p.index) for p in result.parts] == [("prefill", 0), ("prefill", 1),
                                                         ("decode", 0)]
    assert result.traces == tuple(p.trace for p in result.parts)
    assert len(result.completed_requests) == result.summary["completed"] == 8


def test_a_layout_of_one_engine_runs_as_the_single_layout():
    """One replica behind a router is the one engine (same steps, same outcomes)."""
    single, fleet = (sim.simulate(_workload(), SMALL, layout, keep_trace=True) for layout in (sim.Single(),
                                                                            sim.Fleet(1)))
    assert _steps(single) == _steps(fleet)
    assert single.summary["completed"] == fleet.summary["completed"]


def test_bad_layouts_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="replicas must be an integer >= 1"):
        sim.Fleet(0)
    with pytest.raises(ValueError, match="decode instances must be an integer >= 1"):
        sim.Disaggregated(prefill=1, decode=0)
