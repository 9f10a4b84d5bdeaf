"""Weight and KV dtypes per run (sim/precision.py): SGLang's --quantization and
--kv-cache-dtype, the checkpoint's quantization_config, bytes, peaks and the fp8 refusal."""

import pytest

from experiments.cli import main
from shared.workload import Workload
from sim.hardware import get_hardware
from sim.model_shapes import get_model_shape
from sim.precision import run_dtypes
from sim.roofline import RooflineCostModel, kv_capacity_tokens
from sim.simulate import build_simulation

H200 = get_hardware("h200")


@pytest.mark.parametrize("key", ["deepseek-v3", "qwen3-30b-a3b", "llama-3-8b"])
def test_fp8_halves_the_weight_bytes_and_int4_quarters_them(key):
    """--quantization fp8 halves every weight byte of the bf16 model, int4-weight-only
    quarters them, routed experts included."""
    bf16 = get_model_shape(key, weight_dtype=run_dtypes("fp8", "none")[0])
    fp8 = get_model_shape(key, weight_dtype=run_dtypes("bf16", "fp8")[0])
    int4 = get_model_shape(key, weight_dtype=run_dtypes("bf16", "int4-weight-only")[0])
    assert bf16.weight_bytes == 2 * fp8.weight_bytes == 4 * int4.weight_bytes
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
    """DeepSeek-V3's block fp8 checkpoint prices fp8, gpt-oss's mxfp4 int4, Llama bf16."""
    assert get_model_shape("deepseek-v3").weight_dtype == "fp8"
    assert get_model_shape("gpt-oss-120b").weight_dtype == "int4"
    assert get_model_shape("llama-3.1-405b").weight_dtype == "bf16"
    assert run_dtypes("fp8", None) == ("fp8", "bf16")


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
    from sim.simulate import simulate

    with pytest.raises(ValueError, match=match):
        simulate(Workload.synthetic(2, 8, 2, vocab_size=100), model="smollm2-135m", **kw)
