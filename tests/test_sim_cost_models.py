"""Cost models (sim/cost/roofline/model.py, sim/cost/calibrated.py) and the BatchShape they price."""

import itertools
import json

import numpy as np
import pytest

from shared.batch.forward_mode import ForwardMode
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.req import Req
from shared.request.sampling_params import SamplingParams
from shared.trace.step_record import StepRecord
from sim.cost.base import STEP_COST_PARTS, StepCost, ZeroCostModel, reprice
from sim.cost.batch_shape import BatchShape
from sim.cost.calibrated import FEATURES, CalibratedCostModel, nnls, shape_features
from sim.cost.roofline.latency import kernel_latency
from sim.cost.roofline.model import RooflineCostModel
from sim.cost.roofline.overheads import Overheads
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.model.kv_capacity import kv_capacity_tokens
from tests.scripted_runner import ScriptedRunner, drive

LLAMA8 = get_model_shape("llama-3-8b")
H100 = get_hardware("h100")


def _roofline(model=LLAMA8, hw=H100, **kw):
    return RooflineCostModel(model, hw, **kw)


def _decode(seq_lens, padded=None):
    return BatchShape.build("DECODE", seq_lens, padded_batch_size=padded)


def _prefill(lengths, lm_head_rows=None):
    return BatchShape.build("EXTEND", lengths, [0] * len(lengths), lm_head_rows=lm_head_rows)


def _record(shape, duration, step=0):
    """A StepRecord whose batch has `shape` (ids and slots are placeholders)."""
    extend = shape.forward_mode != ForwardMode.DECODE
    t, b = shape.num_tokens, shape.batch_size
    starts = tuple(np.cumsum((0, *shape.extend_lens[:-1])).tolist())
    ext = (lambda v: v) if extend else (lambda v: ())
    return StepRecord(
        step=step, forward_mode=shape.forward_mode.name, rids=tuple(f"r{i}" for i in range(b)),
        input_ids=(1,) * t, positions=tuple(range(t)), out_cache_loc=tuple(range(1, t + 1)),
        req_pool_indices=tuple(range(b)), seq_lens=shape.seq_lens,
        extend_prefix_lens=ext(shape.prefix_lens), extend_seq_lens=ext(shape.extend_lens),
        extend_start_loc=ext(starts), extend_logprob_start_lens=ext((0,) * b),
        pruned_rows=tuple(range(shape.lm_head_rows)), sample_indices=tuple(range(b)),
        next_token_ids=(1,) * b, graph=shape.padding_rows > 0,
        padded_batch_size=shape.padded_batch_size, start_time=0.0, duration=duration)


# --- roofline ---------------------------------------------------------------------------

def test_decode_step_time_grows_with_total_kv_length():
    """Same batch size, longer sequences: the decode step costs more (more KV to read)."""
    times = [_roofline().step_time(_decode([n] * 32)) for n in (128, 1024, 4096, 16384)]
    assert times == sorted(times) and len(set(times)) == 4


def test_prefill_grows_faster_than_linearly_above_the_ridge():
    """Above the ridge point, doubling a prompt more than doubles prefill time (attention is
    quadratic); below it, weight reads dominate and it less than doubles."""
    model = _roofline()
    ridge = H100.ridge_point()
    big, small = 4096, 16
    assert big > ridge > small
    linear = model.linear_time(_prefill([big]))
    assert linear > LLAMA8.linear_weight_bytes / (H100.mem_bw * H100.memory_efficiency)
    assert model.step_time(_prefill([2 * big])) > 2 * model.step_time(_prefill([big]))
    assert model.step_time(_prefill([2 * small])) < 2 * model.step_time(_prefill([small]))


def test_h200_decode_is_faster_than_h100_by_the_bandwidth_ratio():
    """A memory-bound decode batch runs faster on H200 by H200/H100 bandwidth, within 10%."""
    shape = _decode([2048] * 64)
    ratio = _roofline(hw=H100).step_time(shape) / _roofline(hw=get_hardware("h200")).step_time(shape)
    assert ratio == pytest.approx(4.8 / 3.35, rel=0.10)


def test_tp2_shrinks_linear_time_and_adds_allreduce():
    """TP=2 halves linear-layer and attention work (each kernel's latency stays: the same
    kernels run on every rank) and adds an all-reduce cost that TP=1 does not have."""
    shape = _prefill([2048, 1024])
    one, two = _roofline().step_cost(shape), _roofline(tp=2).step_cost(shape)
    latency = kernel_latency(LLAMA8, 1)
    assert kernel_latency(LLAMA8, 2) == latency
    assert two.linear - latency.naive_linear == pytest.approx((one.linear - latency.naive_linear) / 2)
    assert one.allreduce == 0 < two.allreduce
    assert two.attention - latency.attention == pytest.approx((one.attention - latency.attention) / 2)


def test_lm_head_is_priced_on_pruned_rows_only():
    """More pruned rows cost more LM-head time; more tokens with the same rows do not."""
    model = _roofline()
    few, many = _prefill([4096], lm_head_rows=1), _prefill([4096], lm_head_rows=4096)
    assert model.step_cost(many).lm_head > model.step_cost(few).lm_head
    assert model.step_cost(_prefill([8192], lm_head_rows=1)).lm_head == model.step_cost(few).lm_head


def test_graph_padding_rows_add_cost():
    """A decode batch padded to a captured size costs more than the same batch unpadded."""
    model = _roofline()
    assert model.step_time(_decode([4000] * 5, padded=8)) > model.step_time(_decode([4000] * 5))


def test_padding_rows_are_priced_as_decode_rows_with_seq_len_one():
    """Padding 5 requests to 8 costs what 8 requests (3 of seq_len 1) cost, all 8 through the
    LM head."""
    model = _roofline(tp=2)
    padded = _decode([4000] * 5, padded=8)
    explicit = _decode([4000] * 5 + [1] * 3)
    assert model.step_cost(padded) == model.step_cost(explicit)


def test_step_time_is_the_sum_of_non_negative_parts():
    """step_time equals the breakdown's total and every part is >= 0."""
    cost = _roofline(tp=4).step_cost(BatchShape.build("MIXED", [900, 51, 7], [400, 50, 6]))
    assert cost._fields == STEP_COST_PARTS and all(v >= 0 for v in cost)
    assert _roofline(tp=4).step_time(BatchShape.build("MIXED", [900, 51, 7], [400, 50, 6])) == cost.total
    assert cost.parts() == dict(zip(STEP_COST_PARTS, cost, strict=True))


def test_overheads_are_per_step_plus_per_layer():
    """The overhead part is per_step + per_layer * layers; an idle step pays per_step only."""
    model = _roofline(overheads=Overheads(per_step=1e-3, per_layer=1e-5))
    assert model.step_cost(_decode([10])).overhead == pytest.approx(1e-3 + 32 * 1e-5)
    idle = BatchShape.build("IDLE", [])
    assert model.step_cost(idle) == StepCost(overhead=1e-3)


def test_fp8_weights_use_fp8_peak_or_run_weight_only_without_it():
    """fp8 weights run at the fp8 peak on H100 and at the bf16 peak on A100 (no fp8 units)."""
    fp8 = get_model_shape("llama-3-8b", weight_dtype="fp8")
    assert _roofline(model=fp8).linear_peak == H100.flops_fp8
    a100 = get_hardware("a100-80g")
    assert _roofline(model=fp8, hw=a100).linear_peak == a100.flops_bf16


def test_fp32_weights_on_hardware_without_an_fp32_peak_raise():
    """910b has no fp32 figure: pricing fp32 weights on it says so."""
    with pytest.raises(ValueError, match="910b has no fp32 peak"):
        _roofline(model=get_model_shape("smollm2-135m", weight_dtype="fp32"),
                  hw=get_hardware("910b"))


@pytest.mark.parametrize("tp", [0, -2, 3, 1.5, True, "2"])
def test_bad_tp_raises(tp):
    """tp must be a positive int dividing the attention heads."""
    with pytest.raises(ValueError, match="tp"):
        _roofline(tp=tp)


def test_bad_efficiencies_and_overheads_raise():
    """Efficiencies outside (0, 1] and negative overheads are rejected."""
    with pytest.raises(ValueError, match="efficiency compute"):
        _roofline(efficiencies=H100.efficiencies._replace(compute=0))
    with pytest.raises(ValueError, match="per_layer"):
        Overheads(per_layer=-1)


def test_zero_cost_model_prices_every_step_at_zero():
    """The null model returns an all-zero StepCost."""
    assert ZeroCostModel().step_time(_prefill([100])) == 0.0


# --- KV capacity -----------------------------------------------------------------------

def test_kv_capacity_prefers_a_real_runs_max_total_tokens():
    """A given max_total_tokens always wins over the memory estimate."""
    assert kv_capacity_tokens(LLAMA8, H100, tp=1, max_total_tokens=12345) == 12345


def test_kv_capacity_from_memory_follows_the_formula():
    """(capacity * tp - weights - reserve) / KV bytes per token, when tp divides KV heads."""
    model = get_model_shape("llama-3-70b")
    got = kv_capacity_tokens(model, H100, tp=4, reserve_fraction=0.1)
    want = (80e9 * 4 - model.weight_bytes - 0.1 * 80e9 * 4) / model.kv_bytes_per_token
    assert got == pytest.approx(want, abs=1)


def test_kv_capacity_counts_replicated_kv_heads_when_tp_exceeds_them():
    """With tp=16 > 8 KV heads each rank holds a whole KV head, so tokens do not double."""
    model = get_model_shape("llama-3-70b")
    assert kv_capacity_tokens(model, H100, tp=16) < 2 * kv_capacity_tokens(model, H100, tp=8)


def test_kv_capacity_raises_when_the_weights_do_not_fit():
    """Llama-3-70B bf16 (141 GB) on one A100-80G raises a clear error."""
    with pytest.raises(ValueError, match="does not fit"):
        kv_capacity_tokens(get_model_shape("llama-3-70b"), get_hardware("a100-80g"), tp=1)


@pytest.mark.parametrize("kw", [{"max_total_tokens": 0}, {"reserve_fraction": 1.0}, {"tp": -1}])
def test_kv_capacity_rejects_bad_arguments(kw):
    """Non-positive token counts, a reserve of everything and negative tp raise ValueError."""
    with pytest.raises(ValueError):
        kv_capacity_tokens(LLAMA8, H100, **{"tp": 1, **kw})


# --- BatchShape ------------------------------------------------------------------------

class _CapturingRunner(ScriptedRunner):
    """Records the BatchShape of every live ForwardBatch at the size the runner ran it."""

    def __init__(self, vocab_size):
        super().__init__(vocab_size, graph_sizes=[1, 2, 4, 8])
        self.shapes = []

    def forward(self, fb):
        out = super().forward(fb)
        self.shapes.append(BatchShape.from_forward_batch(fb, out.padded_batch_size))
        return out


def test_shape_from_forward_batch_equals_shape_from_step_record():
    """Every step of a run (prefix hits, chunked prefill, graph padding) gives the same
    BatchShape from its live ForwardBatch and from its recorded StepRecord."""
    model = ModelInfo(vocab_size=64, eos_token_ids=(0,), context_length=256)
    config = EngineConfig(max_total_tokens=2048, chunked_prefill_size=16, cuda_graph_max_bs=8)
    sched = Scheduler(config, model)
    runner = _CapturingRunner(model.vocab_size)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    shared = list(range(1, 13))
    reqs = [Req(f"q{i}", shared + [20 + i] * (3 + 9 * i), params, arrival_time=0.02 * i)
            for i in range(5)]
    drive(sched, runner, reqs)
    recorded = [BatchShape.from_step_record(r) for r in sched.trace.steps]
    assert recorded == runner.shapes
    modes = {s.forward_mode for s in recorded}
    assert {ForwardMode.EXTEND, ForwardMode.DECODE} <= modes
    assert any(s.padding_rows for s in recorded) and any(sum(s.prefix_lens) for s in recorded
                                                        if s.forward_mode.is_extend())


def test_decode_shape_has_prefix_seq_len_minus_one():
    """A decode row is a 1-token extend over seq_len - 1 cached tokens."""
    shape = _decode([5, 9], padded=4)
    assert (shape.prefix_lens, shape.extend_lens, shape.num_tokens) == ((4, 8), (1, 1), 2)
    assert (shape.rows, shape.decode_rows, shape.kv_tokens, shape.padded_lm_head_rows) == (4, 4, 16, 4)


@pytest.mark.parametrize("kw", [
    {"seq_lens": (5,), "prefix_lens": (5,), "extend_lens": (1,)},
    {"num_tokens": 7},
    {"lm_head_rows": 9},
    {"padded_batch_size": 1},
    {"prefix_lens": (1,)},
])
def test_inconsistent_batch_shapes_raise(kw):
    """Mismatched lengths, token counts, LM-head rows or padding raise ValueError."""
    base = dict(forward_mode=ForwardMode.EXTEND, num_tokens=8, prefix_lens=(2, 0),
                extend_lens=(3, 5), seq_lens=(5, 5), lm_head_rows=2, padded_batch_size=2)
    with pytest.raises(ValueError, match="BatchShape"):
        BatchShape(**{**base, **kw})


def test_reprice_prices_every_recorded_step():
    """reprice gives one time per record, equal to pricing its shape directly."""
    shapes = [_prefill([300, 20]), _decode([301, 21], padded=4)]
    records = [_record(s, 0.01, i) for i, s in enumerate(shapes)]
    model = _roofline()
    assert reprice(model, records).tolist() == [model.step_time(s) for s in shapes]


# --- calibrated --------------------------------------------------------------------------

TRUE_COEF = np.array([2e-3, 4e-5, 1.5e-5, 2e-8, 3e-11, 5e-6])


def _random_shapes(n, seed=0):
    rng = np.random.default_rng(seed)
    shapes = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            bs = int(rng.integers(1, 64))
            seq = rng.integers(10, 4000, bs)
            shapes.append(_decode(seq, padded=int(-(-bs // 8) * 8)))
        else:
            bs = int(rng.integers(1, 5))
            prefix = rng.integers(0, 2000, bs) * (kind == 2)
            extend = rng.integers(1, 3000, bs)
            rows = bs if rng.random() < 0.5 else int(extend.sum())
            shapes.append(BatchShape.build("EXTEND", prefix + extend, prefix, lm_head_rows=rows))
    return shapes


def _brute_force_nnls(a, b):
    """The best least-squares fit over every subset of columns whose solution is >= 0."""
    best, best_res = np.zeros(a.shape[1]), np.linalg.norm(b)
    for mask in itertools.product([False, True], repeat=a.shape[1]):
        cols = np.flatnonzero(mask)
        if not len(cols):
            continue
        z = np.zeros(a.shape[1])
        z[cols] = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
        if z.min() >= 0 and np.linalg.norm(a @ z - b) < best_res:
            best, best_res = z, np.linalg.norm(a @ z - b)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_nnls_matches_brute_force_and_kkt(seed):
    """NNLS equals the best non-negative fit over all active sets and meets the KKT
    conditions (zero gradient on positive coefficients, none pointing into x < 0)."""
    rng = np.random.default_rng(seed)
    a = rng.random((30, 5))
    b = a @ rng.normal(size=5) + 0.1 * rng.normal(size=30)
    got = nnls(a, b)
    assert got.min() >= 0 and np.allclose(got, _brute_force_nnls(a, b), atol=1e-9)
    grad = a.T @ (b - a @ got)
    assert np.all(grad < 1e-9) and np.allclose(grad[got > 0], 0, atol=1e-9)


def test_nnls_recovers_a_feasible_exact_solution():
    """When b = a x with x >= 0, NNLS returns x."""
    a = np.random.default_rng(1).random((30, 4))
    x = np.array([1.0, 0.5, 2.0, 0.0])
    assert np.allclose(nnls(a, a @ x), x)


def test_calibrated_fit_recovers_known_coefficients_within_one_percent():
    """Records timed by known non-negative coefficients fit back to them within 1%."""
    shapes = _random_shapes(90)
    records = [_record(s, float(shape_features(s) @ TRUE_COEF), i) for i, s in enumerate(shapes)]
    model = CalibratedCostModel.fit(records, source="synthetic, known coefficients")
    assert np.allclose(model.coefficients, TRUE_COEF, rtol=0.01)
    assert model.fit_mape < 1e-6 and model.num_records == 90


def test_calibrated_fit_keeps_a_zero_coefficient_non_negative():
    """A feature that does not matter fits to (about) zero, never below."""
    coef = TRUE_COEF.copy()
    coef[FEATURES.index("decode_rows")] = 0.0
    shapes = _random_shapes(60, seed=3)
    model = CalibratedCostModel.fit_shapes(shapes, [float(shape_features(s) @ coef) for s in shapes])
    assert min(model.coefficients) >= 0
    assert np.allclose(model.coefficients, coef, rtol=0.01, atol=1e-12)


def test_calibrated_step_cost_maps_features_to_parts():
    """The breakdown puts constant/decode rows in overhead, tokens in linear, KV and pairs in
    attention, LM-head rows in lm_head; its total is the linear prediction."""
    model = CalibratedCostModel(tuple(TRUE_COEF))
    shape = _prefill([100, 50])
    cost = model.step_cost(shape)
    assert cost.total == pytest.approx(float(shape_features(shape) @ TRUE_COEF))
    assert cost.lm_head == pytest.approx(5e-6 * 2) and cost.allreduce == 0


def test_calibrated_json_round_trip_gives_identical_predictions(tmp_path):
    """save then load gives bit-identical predictions; the file names features and source."""
    shapes = _random_shapes(30, seed=5)
    model = CalibratedCostModel.fit_shapes(shapes, [float(shape_features(s) @ TRUE_COEF)
                                                    for s in shapes], source="exec on H100")
    path = tmp_path / "calib.json"
    model.save(path)
    data = json.loads(path.read_text())
    assert data["features"] == list(FEATURES) and data["source"] == "exec on H100"
    loaded = CalibratedCostModel.load(path)
    assert loaded == model
    assert [loaded.step_time(s) for s in shapes] == [model.step_time(s) for s in shapes]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(format="other/1"), "format"),
    (lambda d: d.update(features=[*d["features"][:-1], "flops"]), "do not match"),
    (lambda d: d["coefficients"].update(tokens=-1.0), ">= 0"),
])
def test_calibrated_load_rejects_bad_files(tmp_path, edit, message):
    """Wrong format, unknown features and negative coefficients raise ValueError."""
    data = CalibratedCostModel(tuple(TRUE_COEF)).to_dict()
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        CalibratedCostModel.load(path)


@pytest.mark.parametrize(("durations", "message"), [
    ([0.01] * 3, "at least"),
    ([0.01] * 9 + [0.0], "> 0"),
    ([0.01] * 9 + [float("nan")], "> 0"),
])
def test_calibrated_fit_rejects_bad_measurements(durations, message):
    """Too few steps, or zero or NaN durations, raise ValueError."""
    shapes = _random_shapes(len(durations))
    with pytest.raises(ValueError, match=message):
        CalibratedCostModel.fit_shapes(shapes, durations)
