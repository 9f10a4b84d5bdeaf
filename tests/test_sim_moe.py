"""Mixture-of-experts, MLA and expert parallelism in the simulator (sim/model/shape.py,
sim/cost/expert_routing.py, sim/cost/expert_cost.py, sim/model/parallelism.py): weight bytes and FLOPs
against hand counts from DeepSeek-V3's config.json, routing, the all-to-all, bad degrees."""

import math

import pytest

from experiments.main import main
from sim.cost.batch_shape import BatchShape
from sim.cost.expert_routing import ExpertRouting
from sim.cost.roofline.latency import kernel_latency
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.hardware import Efficiencies
from sim.hardware.lookup import get_hardware
from sim.model.from_config import config_dict, get_model_shape
from sim.model.parallelism import weight_bytes_per_gpu

H200 = get_hardware("h200")
PEAK = Efficiencies(1.0, 1.0, 1.0)   # rates are the peaks: times * rate are bytes or FLOPs
# DeepSeek-V3 config.json, by hand: hidden 7168, q_lora 1536, 128 heads of qk 128 + 64 and v 128,
# kv_lora 512; dense MLP 18432; 256 routed experts of 2048, 8 per token, 1 shared expert.
H = 7168
MLA_PARAMS = (H * 1536 + 1536 * 128 * 192 + H * (512 + 64) + 512 * 128 * (128 + 128)
              + 128 * 128 * H)
EXPERT = 3 * H * 2048


def _one_layer(dense: bool):
    """DeepSeek-V3 cut to one layer: its dense first layer, or a sparse one."""
    config = dict(config_dict("deepseek-v3"), num_hidden_layers=1,
                  first_k_dense_replace=1 if dense else 0)
    return get_model_shape(config)


def _roofline(model, **kw):
    return RooflineCostModel(model, H200, efficiencies=PEAK, **kw)


def _decode(rows):
    return BatchShape.build("DECODE", [1] * rows)


def _linear_work(model, rows):
    """linear_time of a decode step of `rows` rows less its kernel latency (its max part)."""
    return model.linear_time(_decode(rows)) - kernel_latency(model.model_shape, 1).linear


def test_dense_layer_weight_bytes_and_flops_match_the_config():
    """DeepSeek-V3's dense layer: MLA projections + 3 * hidden * 18432, read once per step at
    1 byte (fp8) and 2 FLOPs per weight per decode row; no expert time."""
    model = _roofline(_one_layer(dense=True))
    params = MLA_PARAMS + 3 * H * 18432
    assert model.model_shape.shared_linear_params == params
    assert _linear_work(model, 1) * H200.mem_bw == pytest.approx(params * 1)
    rows = 1 << 16
    assert _linear_work(model, rows) * H200.flops_fp8 == pytest.approx(rows * 2 * params)
    assert model.expert_times(rows) == (0.0, 0.0)


def test_sparse_layer_weight_bytes_and_flops_match_the_config():
    """DeepSeek-V3's sparse layer: MLA + router + shared expert per token (the router in
    bf16, the rest fp8); one decode row reads its 8 routed experts, a large batch computes 8
    experts per row."""
    model = _roofline(_one_layer(dense=False))
    shared = MLA_PARAMS + H * 256 + EXPERT
    assert model.model_shape.shared_linear_params == shared
    assert model.model_shape.routed_expert_params == 256 * EXPERT
    assert _linear_work(model, 1) * H200.mem_bw == pytest.approx(shared + H * 256)
    experts, alltoall = model.expert_times(1)
    assert experts * H200.mem_bw == pytest.approx(8 * EXPERT) and alltoall == 0.0
    rows = 1 << 16
    assert model.expert_times(rows)[0] * H200.flops_fp8 == pytest.approx(rows * 8 * 2 * EXPERT)


def test_mla_decode_is_absorbed_and_prefill_naive():
    """Per pair and head: absorbed 2 * (2 * 512 + 64) FLOPs, naive 2 * (192 + 128); prefill
    runs kv_b on every KV token, decode folds it into 2 * kv_b FLOPs per row."""
    shape = get_model_shape("deepseek-v3")
    assert shape.attention_flops_per_pair == 2 * 61 * 128 * (2 * 512 + 64)
    assert shape.naive_attention_flops_per_pair == 2 * 61 * 128 * (192 + 128)
    kv_b = 512 * 128 * 256
    assert shape.kv_up_flops_per_kv_token == 2 * 61 * kv_b
    assert shape.linear_flops_per_token - shape.naive_linear_flops_per_token == 2 * 61 * kv_b


def test_mla_kv_cache_holds_the_latent_on_every_rank():
    """DeepSeek-V3 caches 61 * (512 + 64) values per token, replicated over TP ranks."""
    shape = get_model_shape("deepseek-v3")
    assert shape.kv_bytes_per_token == 61 * 576 * 2 == shape.kv_layout(8).bytes_per_token


def test_uniform_routing_touches_the_expected_distinct_experts():
    """E (1 - (1 - k/E)^T) distinct experts; each EP rank gets T k / ep pairs."""
    for tokens in (1, 7, 64, 4096):
        assert ExpertRouting(256, 8).load(tokens).experts == pytest.approx(
            256 * (1 - (1 - 8 / 256) ** tokens))
        load = ExpertRouting(256, 8, ep_size=8).load(tokens)
        assert load.pairs == pytest.approx(tokens * 8 / 8)
        assert load.experts == pytest.approx(32 * (1 - (1 - 8 / 256) ** tokens))


def test_zipf_skew_loads_the_busiest_rank_and_slows_the_step():
    """A Zipf exponent > 0 gives the busiest rank more than 1/ep of the pairs, so the step
    costs more than under uniform routing."""
    assert ExpertRouting(128, 8, 8).busiest_share == pytest.approx(1 / 8)
    assert ExpertRouting(128, 8, 8, zipf_exponent=1.2).busiest_share > 1 / 8
    shape = get_model_shape("qwen3-30b-a3b")
    uniform = RooflineCostModel(shape, H200, 8, ep_size=8)
    skewed = RooflineCostModel(shape, H200, 8, ep_size=8, expert_zipf=1.2)
    batch = BatchShape.build("EXTEND", [2048], [0])
    assert skewed.step_time(batch) > uniform.step_time(batch)


def test_all_to_all_moves_remote_pairs_over_the_interconnect():
    """Per sparse layer: T k / ep pairs, (ep - 1) / ep of them remote, out and back at
    hidden * 2 bytes, over the one-direction link at its efficiency."""
    shape = get_model_shape("mixtral-8x7b")
    model = RooflineCostModel(shape, H200, 8, ep_size=8)
    rows = 256
    link = H200.interconnect_bw * H200.interconnect_efficiency
    want = 32 * (rows * 2 / 8) * (7 / 8) * 2 * 4096 * 2 / link
    assert model.expert_times(rows)[1] == pytest.approx(want)
    assert RooflineCostModel(shape, H200, 8).expert_times(rows)[1] == 0.0


def test_weight_memory_per_gpu_follows_tp_and_ep():
    """One GPU holds the shared weights / tp and E / ep experts split tp / ep ways."""
    shape = get_model_shape("deepseek-v3")
    experts = shape.expert_weight_bytes
    for tp, ep in ((8, 8), (8, 2), (8, 1)):
        want = (shape.weight_bytes - experts) / tp + experts / ep / (tp // ep)
        assert weight_bytes_per_gpu(shape, tp, ep) == pytest.approx(want)
        assert math.isclose(want, shape.weight_bytes / tp)


def test_the_acceptance_models_simulate_with_tp_ep_and_fp8(capsys):
    """DeepSeek-V3, Qwen3-30B-A3B and Mixtral run on 8x H200 with --ep-size 8 and fp8."""
    for key in ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"):
        assert main(["simulate", "--model", key, "--hardware", "h200", "--tp", "8",
                     "--ep-size", "8", "--quantization", "fp8", "--num-requests", "20",
                     "--rate", "10", "--no-progress"]) == 0
        out = capsys.readouterr().out
        assert "completed 20" in out and "ep=8, fp8" in out


@pytest.mark.parametrize(("args", "match"), [
    (["--model", "deepseek-v3", "--tp", "8", "--ep-size", "3"], "ep_size=3 does not divide"),
    (["--model", "mixtral-8x7b", "--tp", "2", "--ep-size", "4"], "ep_size=4 does not divide tp=2"),
    (["--model", "deepseek-v3", "--tp", "3"], "tp=3 does not divide"),
    (["--model", "llama-3-8b", "--ep-size", "2"], "dense model"),
])
def test_bad_parallel_degrees_are_one_line_naming_the_field(args, match, capsys):
    """An --ep-size or --tp that does not divide the experts, tp or heads exits 1, one line."""
    assert main(["simulate", "--hardware", "h200", "--num-requests", "4", "--no-progress",
                 *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchtwin simulate: ") and match in err and "\n" not in err


def test_plan_sweeps_ep_size_and_quantization(tmp_path, capsys):
    """`plan --ep-size 1,8 --quantization fp8,auto` compares four configurations."""
    import pandas as pd

    out = tmp_path / "plan"
    assert main(["plan", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--tp", "8",
                 "--ep-size", "1,8", "--quantization", "fp8,auto", "--workload", "synthetic",
                 "--prompt-len", "64", "--output-len", "8", "--num-requests", "10",
                 "--seeds", "1", "--rate-tolerance", "0.5", "--chunked-prefill-size", "512",
                 "--max-running-requests", "auto", "--slo", "ttft_p90=1s", "--jobs", "1",
                 "--no-progress", "--out", str(out)]) == 0
    sweep = pd.read_csv(out / "sweep.csv")
    pairs = zip(sweep["ep_size"], sweep["quantization"].fillna("auto"), strict=True)
    assert sorted(pairs) == [(1, "auto"), (1, "fp8"), (8, "auto"), (8, "fp8")]
