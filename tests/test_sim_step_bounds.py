"""What bounds a simulated step (compute, memory, communication, CPU): the cost models'
splits, the steps table's `bound` column, and traces without bounds (exec, read back)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shared.batch.forward_mode import ForwardMode
from shared.trace.run_result import STEP_COLUMNS, RunResult, bound_shares
from shared.trace.trace import Trace
from shared.workload.synthetic import Synthetic
from sim.cost.base import BOUNDS, BoundSplit, ZeroCostModel, bounds_of
from sim.cost.batch_shape import BatchShape
from sim.cost.extend_steps import ExtendSteps
from sim.cost.kernel.model import KernelCostModel
from sim.cost.roofline.model import RooflineCostModel
from sim.cost.roofline.overheads import Overheads
from sim.cost.step_bounds import step_bounds
from sim.hardware.lookup import get_hardware
from sim.model.ep_options import EPOptions
from sim.model.from_config import get_model_shape
from sim.run.simulate import simulate

MODELS = (RooflineCostModel, KernelCostModel)


def _model(cls, model: str = "llama-3-8b", tp: int = 1, hardware=None):
    return cls(get_model_shape(model), hardware or get_hardware("h100"), tp)


def _slow_link():
    """An H100 whose GPUs talk over a 1 GB/s link."""
    return dataclasses.replace(get_hardware("h100"), interconnect_bw=1e9)


# (model, tp, hardware overrides) of the batched-bounds tests
BATCHED_CASES = [
    ("llama-3-8b", 1, {}), ("smollm2-135m", 1, {}), ("llama-3-70b", 8, {"interconnect_bw": 1e9}),
    ("mixtral-8x7b", 2, {}), ("deepseek-v3", 8, {}),
    ("llama-3-8b", 1, {"mem_bw": 1e17})]   # NOTE: memory this fast makes attention compute-bound
SHAPES = (BatchShape.build("DECODE", [2048]), BatchShape.build("DECODE", [700] * 64, padded_batch_size=72),
          BatchShape.build("EXTEND", [8192], [0]), BatchShape.build("EXTEND", [900, 40], [100, 0]),
          BatchShape.build("MIXED", [512, 300, 301], [0, 299, 300]))


@pytest.mark.parametrize("cls", MODELS)
def test_a_batch_of_one_decode_is_memory_bound(cls):
    """8B on one H100, one request decoding: the weights' read dominates."""
    assert _model(cls).step_bound(BatchShape.build("DECODE", [1024])) == "memory"


@pytest.mark.parametrize("cls", MODELS)
def test_a_large_prefill_is_compute_bound(cls):
    """8B on one H100, an 8192-token prefill: the GEMMs run at the matmul rate."""
    assert _model(cls).step_bound(BatchShape.build("EXTEND", [8192], [0])) == "compute"


@pytest.mark.parametrize("cls", MODELS)
def test_tensor_parallel_over_a_slow_link_is_communication_bound(cls):
    """8B at tp 8 over 1 GB/s: two all-reduces per layer outweigh the GEMMs."""
    model = _model(cls, tp=8, hardware=_slow_link())
    assert model.step_bound(BatchShape.build("DECODE", [512] * 64)) == "communication"


@pytest.mark.parametrize("cls", MODELS)
def test_a_tiny_model_under_the_overlap_schedule_is_cpu_bound(cls):
    """SmolLM2-135M decoding 1280 short requests: the scheduler's per-step and per-request
    CPU time hides the device's (the roofline's CPU time is per step and per layer only,
    below its kernels' latency per layer by default: here a 10 ms step's)."""
    model = (_model(cls, "smollm2-135m") if cls is KernelCostModel else
             RooflineCostModel(get_model_shape("smollm2-135m"), get_hardware("h100"),
                               overheads=Overheads(per_step=10e-3)))
    shape = BatchShape.build("DECODE", [16] * 1280)
    split = model.step_split(shape)
    assert split.cpu >= split.device and model.step_bound(shape, overlap=True) == "cpu"


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize(("model", "tp"), [("llama-3-8b", 1), ("llama-3-70b", 4),
                                           ("mixtral-8x7b", 2), ("deepseek-v3", 8)])
def test_a_split_sums_to_the_step_cost_and_decodes_agree(cls, model, tp):
    """Every term >= 0, the four sum to StepCost.total, and decode_step_bound (the trace
    pass's arithmetic) names the bound step_bound does."""
    hw = get_hardware("h200")
    m = cls(get_model_shape(model), hw, tp)
    for shape in SHAPES:
        split = m.step_split(shape)
        assert min(split) >= 0 and sum(split) == pytest.approx(m.step_cost(shape).total, rel=1e-9)
        if shape.forward_mode.is_decode():
            seq = np.asarray(shape.seq_lens, dtype=np.int64)
            for overlap in (False, True):
                assert m.decode_step_bound(seq, shape.padded_batch_size, overlap) == \
                    m.step_bound(shape, overlap)


def test_the_bound_is_the_largest_term_or_cpu_when_it_hides_the_device():
    """Without overlap the largest term wins; under it, cpu only when cpu >= the device."""
    split = BoundSplit(compute=3.0, memory=3.5, communication=0.0, cpu=4.0)
    assert split.bound() == "cpu" and split.bound(overlap=True) == "memory"
    assert BoundSplit(cpu=1.0).bound(overlap=True) == "cpu" and BOUNDS[0] == "compute"


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize(("model", "tp", "hw"), BATCHED_CASES)
def test_decode_steps_bounded_together_name_each_steps_own_bound(cls, model, tp, hw):
    """decode_step_bounds over many steps (the trace pass) equals decode_step_bound of each,
    with and without overlap, for batches of 1 to 300 rows, padded or not."""
    hw = dataclasses.replace(get_hardware("h100"), **hw)
    m, rng = cls(get_model_shape(model), hw, tp), np.random.default_rng(7)
    sizes = rng.integers(1, 300, 200)
    seqs = [rng.integers(1, int(rng.choice([64, 4096, 60000])), n) for n in sizes]
    padded = [n + int(rng.choice([0, 0, 5])) for n in sizes]
    seqs[0], padded[0] = (), 0   # a step of no rows: its overhead alone
    for overlap in (False, True):
        want = [m.decode_step_bound(np.asarray(s, np.int64), p, overlap)
                for s, p in zip(seqs, padded, strict=True)]
        assert m.decode_step_bounds(seqs, padded, overlap) == want
        assert m.decode_step_bounds(seqs[1:], padded[1:], overlap) == want[1:]


@pytest.mark.parametrize("options", [
    {"attention_dp": 8}, {"attention_dp": 8, "ep_options": EPOptions(two_batch_overlap=True)},
    {"attention_dp": 8, "ep_options": EPOptions(a2a_backend="deepep", dp_lm_head=True)}])
def test_kernel_decode_steps_bounded_together_under_wide_ep_name_each_steps_own(options):
    """The kernel model's batched decode bounds (steps of one size together) equal each
    step's own under attention DP, DeepEP and two-batch overlap, repeated sizes included."""
    m = KernelCostModel(get_model_shape("deepseek-v3"), get_hardware("h200"), 8, 8, **options)
    rng = np.random.default_rng(3)
    sizes = rng.choice([1, 7, 64, 300], 120)
    seqs = [rng.integers(1, 60000, n) for n in sizes]
    padded = [int(n) + int(rng.choice([0, 4])) for n in sizes]
    for overlap in (False, True):
        want = [m.decode_step_bound(np.asarray(s, np.int64), p, overlap)
                for s, p in zip(seqs, padded, strict=True)]
        assert m.decode_step_bounds(seqs, padded, overlap) == want


def _extend_steps(rng: np.random.Generator, n: int) -> ExtendSteps:
    """n random extend steps: 1 to 40 requests, cached prefixes or none, 1-token extends
    among them (MIXED), some LM-head rows pruned, some steps padded."""
    modes, seqs, prefixes, lm_rows, padded, tokens = [], [], [], [], [], []
    for _ in range(n):
        b = int(rng.integers(1, 40))
        prefix = rng.integers(0, int(rng.choice([1, 500, 30000])), b)
        extend = np.where(rng.random(b) < 0.5, 1, rng.integers(1, 3000, b))
        modes.append(ForwardMode.MIXED if (extend == 1).any() else ForwardMode.EXTEND)
        seqs.append((prefix + extend).tolist())
        prefixes.append(prefix.tolist())
        lm_rows.append(int(rng.integers(0, b + 1)))
        padded.append(b + int(rng.choice([0, 0, 3])))
        tokens.append(int(extend.sum()))
    return ExtendSteps(modes, seqs, prefixes, lm_rows, padded, tokens)


def test_extend_step_totals_are_each_shapes_own():
    """ExtendSteps.totals (arrays over all the steps) equal each step's BatchShape's."""
    steps = _extend_steps(np.random.default_rng(11), 150)
    t = steps.totals()
    shapes = list(steps.shapes())
    assert t.rows.tolist() == [s.rows for s in shapes]
    assert t.kv_tokens.tolist() == [s.kv_tokens for s in shapes]
    assert t.attention_pairs.tolist() == [s.attention_pairs for s in shapes]
    assert t.lm_head_rows.tolist() == [s.padded_lm_head_rows for s in shapes]


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize(("model", "tp", "hw"), BATCHED_CASES)
def test_extend_steps_bounded_together_name_each_steps_own_bound(cls, model, tp, hw):
    """extend_step_bounds over many extend and mixed steps equals step_bound of each, with
    and without overlap (MLA's naive extend path included)."""
    hw = dataclasses.replace(get_hardware("h100"), **hw)
    m = cls(get_model_shape(model), hw, tp)
    steps = _extend_steps(np.random.default_rng(5), 120)
    for overlap in (False, True):
        want = [m.step_bound(shape, overlap) for shape in steps.shapes()]
        assert m.extend_step_bounds(steps, overlap) == want


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("engine_args", [{}, {"enable_mixed_chunk": True}])
def test_a_runs_bounds_are_each_recorded_steps_own(cls, engine_args):
    """step_bounds of a simulated run (steps bounded together) names, per step, the bound of
    its recorded batch re-priced alone (BatchShape.from_step_record)."""
    workload = Synthetic(40, 300, 24).build(vocab_size=49152, seed=2, rate=200.0)
    result = simulate(workload, model="llama-3-8b", bounds=False, chunked_prefill_size=512,
                      **engine_args, keep_trace=True)
    m = _model(cls)
    for overlap in (False, True):
        want = [m.step_bound(BatchShape.from_step_record(r), overlap) for r in result.trace]
        assert step_bounds(m, result.trace, overlap) == want
    assert {r.forward_mode for r in result.trace} >= {"DECODE", "EXTEND" if not engine_args
                                                      else "MIXED"}


def test_bounds_over_arrays_are_boundsplit_bound_ties_included():
    """bounds_of names, per step, what BoundSplit.bound does, ties and overlap included."""
    rng = np.random.default_rng(3)
    terms = rng.choice([0.0, 1.0, 2.0, 3.0], (4, 500))   # NOTE: small integers: many ties
    for overlap in (False, True):
        want = [BoundSplit(*map(float, t)).bound(overlap) for t in terms.T]
        assert bounds_of(*terms, overlap) == want


def test_the_default_split_counts_device_parts_as_compute():
    """A model that cannot tell compute from memory (the base class's default)."""
    split = ZeroCostModel().step_split(BatchShape.build("DECODE", [8]))
    assert split == BoundSplit()


def test_a_simulated_run_fills_the_bound_column():
    """simulate's steps table has a bound per step, and the shares of step time sum to 1."""
    workload = Synthetic(20, 64, 8).build(vocab_size=49152, seed=0, rate=50.0)
    result = simulate(workload, model="smollm2-135m", keep_trace=True)
    assert list(result.steps.columns) == list(STEP_COLUMNS)
    assert set(result.steps["bound"]) <= set(BOUNDS) and len(result.steps)
    assert sum(bound_shares(result).values()) == pytest.approx(1.0)
    assert set(simulate(workload, model="smollm2-135m", bounds=False, keep_trace=True).steps["bound"]) == {""}


def test_a_trace_without_bounds_still_builds_a_run_result(tmp_path):
    """An exec-style trace (saved and read back, no bounds): the column is "" throughout."""
    workload = Synthetic(6, 32, 4).build(vocab_size=49152, seed=1, rate=20.0)
    result = simulate(workload, model="smollm2-135m", cost_model="kernel", keep_trace=True)
    result.trace.save(tmp_path / "trace.jsonl")
    again = RunResult.from_trace(Trace.load(tmp_path / "trace.jsonl"))
    assert set(again.steps["bound"]) == {""} and bound_shares(again) == {}
    assert again.summary["completed"] == result.summary["completed"]
