"""Weight and KV dtypes per run (sim/hardware/precision.py): SGLang's --quantization and
--kv-cache-dtype, the checkpoint's quantization_config, bytes, peaks and the fp8 and nvfp4
refusals."""

import dataclasses
import json

import numpy as np
import pytest

from experiments.main import main
from shared.workload.synthetic import Synthetic
from sim.cost.batch_shape import BatchShape
from sim.cost.kernel.elementwise_traffic import elementwise_row_bytes
from sim.cost.kernel.model import KernelCostModel
from sim.cost.roofline.latency import kernel_latency
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.hardware import NUMBER_FIELDS
from sim.hardware.lookup import get_hardware, load_hardware_file
from sim.hardware.precision import run_dtypes
from sim.model.from_config import config_dict, get_model_shape
from sim.model.kv_capacity import kv_capacity_tokens
from sim.run.build import build_simulation

H100 = get_hardware("h100")
H200 = get_hardware("h200")
B200 = get_hardware("b200")
PREFILL = BatchShape.build("EXTEND", [8192], [0], 1)   # one 8192-token prompt: compute-bound


@pytest.mark.parametrize("key", ["deepseek-v3", "qwen3-30b-a3b", "llama-3-8b"])
def test_fp8_halves_the_linear_weight_bytes_and_int4_quarters_them(key):
    """--quantization fp8 halves the bytes of every quantized group of the bf16 model
    (attention, MLPs and shared experts, routed experts), int4-weight-only quarters them; the
    router, embeddings, LM head, norms and biases stay bf16."""
    bf16 = get_model_shape(key, weight_dtype=run_dtypes("fp8", "none")[0])
    fp8 = get_model_shape(key, weight_dtype=run_dtypes("bf16", "fp8")[0])
    int4 = get_model_shape(key, weight_dtype=run_dtypes("bf16", "int4-weight-only")[0])
    for group in ("attention", "mlp", "experts"):
        assert bf16.module_bytes_per_param(group) == 2 * fp8.module_bytes_per_param(group) \
            == 4 * int4.module_bytes_per_param(group)
    for group in ("router", "embedding", "lm_head"):
        assert {m.module_dtype(group) for m in (bf16, fp8, int4)} == {"bf16"}
    quantized = bf16.attention_weight_bytes + bf16.mlp_params * 2 + bf16.expert_weight_bytes
    assert bf16.weight_bytes - fp8.weight_bytes == pytest.approx(quantized / 2)
    assert bf16.weight_bytes - int4.weight_bytes == pytest.approx(quantized * 3 / 4)
    assert bf16.expert_weight_bytes == 2 * fp8.expert_weight_bytes


def test_fp8_kv_cache_doubles_the_kv_capacity():
    """--kv-cache-dtype fp8_e4m3 halves KV bytes per token, so twice the tokens fit."""
    for key, tp in (("qwen3-30b-a3b", 8), ("deepseek-v3", 8), ("llama-3-8b", 1)):
        bf16 = get_model_shape(key)
        fp8 = bf16.with_dtypes(kv_dtype=run_dtypes(bf16.weight_dtype, None, "fp8_e4m3")[1])
        assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
        base = kv_capacity_tokens(bf16, H200, tp)
        assert kv_capacity_tokens(fp8, H200, tp) in (2 * base, 2 * base + 1)


def test_the_checkpoint_quantization_config_sets_the_default_weight_dtype():
    """DeepSeek-V3's block fp8 checkpoint prices fp8, gpt-oss's mxfp4 mxfp4, Llama bf16."""
    assert get_model_shape("deepseek-v3").weight_dtype == "fp8"
    assert get_model_shape("gpt-oss-120b").weight_dtype == "mxfp4"
    assert get_model_shape("llama-3.1-405b").weight_dtype == "bf16"
    assert run_dtypes("fp8", None) == ("fp8", "bf16")


def test_gpt_oss_prices_mxfp4_experts_and_bf16_attention_router_embeddings_and_head():
    """gpt-oss-120b's checkpoint quantizes only its routed experts (`modules_to_not_convert`:
    attention, router, embeddings, LM head): the experts at 0.5 + 1/32 bytes a weight (4-bit
    values, an E8M0 scale per 32), the rest at 2; 116.8 B parameters in about 65.2 GB."""
    m = get_model_shape("gpt-oss-120b")
    assert m.module_dtype("experts") == "mxfp4" and m.module_bytes_per_param("experts") == 0.53125
    assert {m.module_dtype(g) for g in ("attention", "router", "embedding", "lm_head")} == {"bf16"}
    assert m.expert_weight_bytes == m.routed_expert_params * 0.53125
    assert m.attention_weight_bytes == 36 * m.attention_params_per_layer * 2
    assert m.weight_bytes == pytest.approx(65.17e9, rel=1e-3)
    quantized_all = get_model_shape({**config_dict("gpt-oss-120b"), "quantization_config": {
        "quant_method": "mxfp4"}})
    assert quantized_all.module_dtype("attention") == "mxfp4"
    assert quantized_all.weight_bytes < m.weight_bytes


def test_a_batch1_decode_of_gpt_oss_reads_its_bf16_attention_and_head():
    """One decode row of gpt-oss-120b on H100 reads the bf16 attention projections, router and
    LM head besides its 4 experts per layer: priced every weight as mxfp4, the step would
    miss their extra bytes (2 - 0.53125 a weight) at the memory rate or more."""
    m = get_model_shape("gpt-oss-120b")
    step = BatchShape.decode(np.array([512]), 1)
    mixed = RooflineCostModel(m, H100).step_time(step)
    every = RooflineCostModel(dataclasses.replace(m, unquantized=()), H100).step_time(step)
    extra = (m.num_layers * m.attention_params_per_layer + m.router_params
             + m.embedding_params) * (2 - 0.53125)
    assert (mixed - every) * H100.mem_bw >= extra


def test_fp8_runs_at_the_fp8_peak_and_int4_weight_only_at_bf16():
    """W8A8 fp8 GEMMs run at the fp8 peak; int4 weights are dequantised to bf16."""
    fp8 = get_model_shape("mixtral-8x7b", weight_dtype="fp8")
    int4 = get_model_shape("mixtral-8x7b", weight_dtype="int4")
    assert RooflineCostModel(fp8, H200).linear_peak == H200.flops_fp8
    assert RooflineCostModel(int4, H200).linear_peak == H200.flops_bf16


def test_the_trace_header_records_ep_size_and_dtypes():
    """A run's executor header names its ep_size and weight and KV dtypes."""
    s = build_simulation(model="qwen3-30b-a3b", hardware="h200", tp=4, ep_size=4,
                         quantization="fp8", kv_cache_dtype="fp8_e5m2")
    ex = s.scheduler.trace.executor
    assert (ex["ep_size"], ex["weight_dtype"], ex["kv_dtype"]) == (4, "fp8", "fp8")


@pytest.mark.parametrize("args", [["--model", "llama-3-8b", "--quantization", "fp8"],
                                  ["--model", "deepseek-v3", "--tp", "8"]])
def test_fp8_on_hardware_without_an_fp8_peak_is_one_line_naming_it(args, capsys):
    """fp8 asked for (or a checkpoint's fp8) on A100 exits 1 naming the hardware and field."""
    assert main(["simulate", "--hardware", "a100-80g", "--num-requests", "4", "--no-progress",
                 *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchtwin simulate: ") and "\n" not in err
    assert "a100-80g" in err and "flops_fp8" in err


def test_fp8_refusal_happens_before_anything_runs():
    """build_simulation refuses fp8 on A100 before a scheduler exists."""
    with pytest.raises(ValueError, match="quantization 'fp8' needs fp8 tensor cores"):
        build_simulation(model="llama-3-8b", hardware="a100-80g", quantization="fp8")


@pytest.mark.parametrize(("kw", "match"), [({"quantization": "int8"}, "quantization 'int8'"),
                                           ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype 'fp4'")])
def test_unknown_quantization_names_are_refused_naming_the_field(kw, match):
    """Unknown --quantization and --kv-cache-dtype values raise ValueError naming the field."""
    from sim.run.simulate import simulate

    with pytest.raises(ValueError, match=match):
        simulate(Synthetic(2, 8, 2).build(vocab_size=100), model="smollm2-135m", **kw, keep_trace=True)


def test_nvfp4_weights_cost_0_5625_bytes_per_param_a_dense_layer_by_hand():
    """A Llama-3-8B layer (218,112,000 params: q/o 4096^2 each, k/v 4096x1024 each, MLP
    3x4096x14336, two 4096 norms) is 122,699,776 bytes in nvfp4 (the 218,103,808 linear
    weights at 0.5625, the two norms in bf16)."""
    linear = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    nvfp4 = get_model_shape("llama-3-8b", weight_dtype=run_dtypes("bf16", "nvfp4")[0])
    assert nvfp4.params_per_layer == linear + 2 * 4096 == 218_112_000
    assert nvfp4.weight_bytes_per_layer == linear * 0.5625 + 2 * 4096 * 2 == 122_699_776


def test_modelopt_fp4_is_sglangs_name_for_nvfp4():
    """--quantization modelopt_fp4 and nvfp4 give the same weight dtype; KV stays bf16."""
    assert run_dtypes("bf16", "modelopt_fp4") == run_dtypes("bf16", "nvfp4") == ("nvfp4", "bf16")


def test_nvfp4_gemms_run_at_the_fp4_peak_so_b200_prefill_is_about_twice_fp8():
    """On B200 nvfp4 linears run at 9 PFLOP/s, twice fp8; a long prefill takes ~half as long
    (beside its kernels' latency, the same kernels in both)."""
    fp8, nvfp4 = (RooflineCostModel(get_model_shape("llama-3-70b", weight_dtype=d), B200)
                  for d in ("fp8", "nvfp4"))
    assert nvfp4.linear_peak == B200.flops_fp4 == 2 * B200.flops_fp8 == 9000e12
    latency = kernel_latency(fp8.model_shape, 1).naive_linear
    assert fp8.linear_time(PREFILL) - latency == pytest.approx(
        2 * (nvfp4.linear_time(PREFILL) - latency))
    assert 1.7 < fp8.step_time(PREFILL) / nvfp4.step_time(PREFILL) <= 2


def test_the_kernel_model_prices_nvfp4_gemms_at_the_fp4_mamf():
    """B200's fp4 MAMF is the published sweep's best (5702 TFLOP/s, below the 9000 peak);
    a long prefill's linear GEMMs take the fp8 time over the MAMF ratio (1.66), within 5%
    (beside the bf16 elementwise kernels and the KV store, the same bytes in both)."""
    chip = B200.kernels
    assert chip.mamf("nvfp4") == pytest.approx(5702e12) and chip.mamf("nvfp4") < B200.flops_fp4
    fp8, nvfp4 = (KernelCostModel(get_model_shape("llama-3-70b", weight_dtype=d), B200)
                  for d in ("fp8", "nvfp4"))
    rows = PREFILL.rows
    streamed = (rows * sum(elementwise_row_bytes(get_model_shape("llama-3-70b"), 1, 1, 2))
                / (B200.mem_bw * 0.8) + fp8._kernels.kv_write(rows))
    gemms = [m.step_cost(PREFILL).linear - streamed for m in (fp8, nvfp4)]
    assert gemms[0] / gemms[1] == pytest.approx(chip.mamf("nvfp4") / chip.mamf("fp8"), rel=0.05)


def test_nvfp4_on_hopper_is_refused_naming_the_hardware_and_flops_fp4(capsys):
    """nvfp4 on H100 exits 1 with one line naming h100 and flops_fp4, before anything runs."""
    with pytest.raises(ValueError, match="quantization 'nvfp4' needs fp4 tensor cores"):
        build_simulation(model="llama-3-8b", hardware="h100", quantization="nvfp4")
    assert main(["simulate", "--hardware", "h100", "--model", "llama-3-8b", "--quantization",
                 "nvfp4", "--num-requests", "4", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchtwin simulate: ") and "\n" not in err
    assert "h100" in err and "flops_fp4" in err


def test_nvfp4_simulates_on_b200_through_simulate_and_the_cli(capsys):
    """simulate() and `batchtwin simulate --quantization nvfp4 --hardware b200` both run,
    and the trace header records the nvfp4 weights."""
    from sim.run.simulate import simulate

    result = simulate(Synthetic(4, 16, 4).build(vocab_size=1000), model="llama-3-8b",
                      hardware="b200", quantization="modelopt_fp4", keep_trace=True)
    assert len(result.requests) == 4
    assert result.trace.executor["weight_dtype"] == "nvfp4"
    assert main(["simulate", "--hardware", "b200", "--model", "llama-3-8b", "--quantization",
                 "nvfp4", "--num-requests", "8", "--no-progress"]) == 0
    assert "nvfp4" in capsys.readouterr().out


def test_hardware_json_entries_without_flops_fp4_still_load(tmp_path):
    """A new JSON entry that leaves out flops_fp4 (and its source) loads with no fp4 peak."""
    fields = [f for f in NUMBER_FIELDS if f != "flops_fp4"]
    entry = {f: 0.5 if "efficiency" in f else 1e12 for f in fields}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps({"x1": {**entry, "sources": {f: "vendor sheet" for f in fields}},
                                "x2": {"base": "h100", "mem_bw": 2e12}}))
    loaded = load_hardware_file(path)
    assert loaded["x1"].flops_fp4 is None and "none" in loaded["x1"].source("flops_fp4")
    assert loaded["x2"].flops_fp4 is None and loaded["x2"].peak_flops("nvfp4") is None


@pytest.mark.parametrize("quantization, dtype", [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}, "int4"),
    ({"quant_method": "awq", "bits": 4}, "int4"),
    ({"quant_method": "mxfp4"}, "mxfp4")])
def test_a_checkpoints_quantization_config_names_its_weight_format(quantization, dtype):
    """ModelOpt's quant_algo and compressed-tensors' weight groups name the format."""
    config = {**config_dict("llama-3.1-8b"), "quantization_config": quantization}
    assert get_model_shape(config).weight_dtype == dtype


@pytest.mark.parametrize("quantization, name", [
    ({"quant_method": "modelopt", "quant_algo": "W8A8_SQ_PER_CHANNEL"}, "W8A8_SQ_PER_CHANNEL"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"}}}}, "(8, 'int')"),
    ({"quant_method": "gptq", "bits": 8}, "8-bit integer"),
    ({"quant_method": "hqq"}, "'hqq'")])
def test_a_weight_format_no_cost_model_prices_is_refused_by_name(quantization, name):
    config = {**config_dict("llama-3.1-8b"), "quantization_config": quantization}
    with pytest.raises(ValueError) as e:
        get_model_shape(config)
    assert name in str(e.value)
