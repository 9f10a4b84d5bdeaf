"""`experiments.published_check`: calibration rows become the simulator runs they describe,
rows it cannot express say why, and the report's errors and medians are computed as stated."""

from __future__ import annotations

import math

import pytest

from experiments.published_check.express import express
from experiments.published_check.predict import Prediction, build_workload, predict, predict_all
from experiments.published_check.report import rows_frame, summary_frame
from experiments.published_check.row_spec import RowSpec, Unexpressed
from experiments.published_check.sources import half_of, source_name
from sim.cost.engine_profile import get_engine_profile

TRT = "github:NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @258c7540 (throughput)"
ROW = {"id": "r1", "source": TRT, "model": "meta-llama/Llama-3.1-70B",
       "precision": "fp8 (weights+activations; KV cache fp8)", "gpu": "H100-SXM-80GB",
       "tp": "4", "dp": "1", "ep": "1", "input_len": "2048", "output_len": "128",
       "num_prompts": "3000", "request_rate_or_concurrency": "inf",
       "metric": "Output token throughput (whole system)", "value": "5480.03", "unit": "tok/s",
       "caveat": ""}


ROW_COLUMNS = ("id", "source", "engine", "engine_version", "model", "precision", "gpu",
               "num_gpus", "tp", "dp", "ep", "workload", "input_len", "output_len",
               "num_prompts", "request_rate_or_concurrency", "metric", "value", "unit",
               "confidence", "caveat")


def test_a_fixed_length_throughput_row_becomes_its_run():
    """Model, hardware, TP, dtypes, lengths, count and metric are read from the row."""
    spec = express(ROW)
    assert isinstance(spec, RowSpec)
    assert spec.sim_args == {"model": "llama-3.1-70b", "hardware": "h100", "tp": 4, "ep_size": 1,
                             "quantization": "fp8", "kv_cache_dtype": "fp8_e4m3"}
    w = spec.workload
    assert (w.num_prompts, w.input_len, w.output_len, math.isinf(w.rate)) == (3000, 2048, 128, True)
    assert (spec.metric, spec.scale, spec.published, spec.source) == \
        ("output_throughput", 1.0, 5480.03, "trt-v0.17")
    assert spec.groups == ("offline throughput", "TP > 1", "fp8")


def test_a_closed_loop_row_limits_running_requests_and_counts_its_rounds():
    """conc=N: at most N running, all queued at t=0; "10 rounds x concurrency" prompts."""
    row = {**ROW, "request_rate_or_concurrency": "conc=64",
           "num_prompts": "n/s (10 rounds x concurrency)", "precision": "fp16"}
    spec = express(row)
    assert spec.sim_args["max_running_requests"] == 64 and spec.workload.num_prompts == 640
    assert spec.sim_args["quantization"] == "none" and spec.sim_args["kv_cache_dtype"] == "auto"


def test_a_closed_loop_ttft_runs_one_round_without_queueing():
    """Mean first-token latency at conc=1: one request, so no queue wait counts."""
    row = {**ROW, "request_rate_or_concurrency": "conc=1", "metric": "Mean first-token latency",
           "unit": "ms", "num_prompts": "n/s (10 rounds x concurrency)"}
    spec = express(row)
    assert (spec.workload.num_prompts, spec.metric, spec.scale) == (1, "ttft_mean", 1e3)
    assert "online TTFT" in spec.groups and spec.assumptions


@pytest.mark.parametrize(("change", "reason"), [
    ({"gpu": "Intel Gaudi 3"}, "not in the hardware catalogue"),
    ({"tp": "8", "dp": "32"}, "dp=32 above tp=8"),
    ({"tp": "1", "dp": "8", "request_rate_or_concurrency": "conc=64"},
     "8 data-parallel replicas of a closed loop"),
    ({"tp": "n/s"}, "parallel layout"),
    ({"model": "Qwen/Qwen2-72B"}, "no embedded config"),
    ({"metric": "Output tokens/s per user at batch 1"}, "no simulator counterpart"),
    ({"request_rate_or_concurrency": "server (target QPS not in the summary page)"}, "target-QPS"),
    ({"input_len": "dataset:some-corpus", "output_len": "dataset"}, "not published"),
])
def test_rows_the_simulator_cannot_run_say_why(change, reason):
    """Each unsupported field gives an Unexpressed naming it, never a guess."""
    out = express({**ROW, **change})
    assert isinstance(out, Unexpressed) and reason in out.reason and out.row_id == "r1"


def test_an_attention_dp_row_runs_with_dp_attention_over_its_tp():
    """tp 8, dp 8: SGLang's --enable-dp-attention --dp-size 8, the even spread assumed."""
    spec = express({**ROW, "tp": "8", "dp": "8", "ep": "8", "model": "deepseek-ai/DeepSeek-R1"})
    assert (spec.sim_args["dp_size"], spec.sim_args["enable_dp_attention"]) == (8, True)
    assert any("spread evenly" in a for a in spec.assumptions)


def test_attention_dp_named_only_in_the_caveat_takes_dp_and_ep_from_tp():
    """TRT-LLM's enable_attention_dp with dp and ep n/s: dp = ep = tp, both written down."""
    spec = express({**ROW, "tp": "8", "dp": "n/s", "ep": "n/s",
                    "model": "nvidia/Qwen3-235B-A22B-FP8",
                    "caveat": "MoE command passes --ep and turns on attention DP"})
    assert (spec.sim_args["dp_size"], spec.sim_args["ep_size"]) == (8, 8)
    assert sum("not published" in a for a in spec.assumptions) == 2


def test_a_modelopt_checkpoint_without_a_kv_dtype_gets_modelopts_fp8_kv():
    """ModelOpt's export quantizes the KV cache to fp8 by default; the assumption is named."""
    spec = express({**ROW, "precision": "fp8 (ModelOpt FP8 checkpoint; KV dtype not stated)"})
    assert spec.sim_args["kv_cache_dtype"] == "fp8_e4m3"
    assert any("ModelOpt" in a for a in spec.assumptions)


def test_an_nvfp4_row_runs_nvfp4_weights_and_a_maverick_row_its_model():
    """nvfp4 precision: --quantization nvfp4; Llama-4 Maverick: the embedded llama-4-maverick."""
    spec = express({**ROW, "precision": "nvfp4 (ModelOpt FP4 checkpoint)", "gpu": "B200"})
    assert (spec.sim_args["quantization"], spec.sim_args["hardware"]) == ("nvfp4", "b200")
    spec = express({**ROW, "model": "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "tp": "8"})
    assert spec.sim_args["model"] == "llama-4-maverick"


LMSYS = {**ROW, "model": "deepseek-ai/DeepSeek-V3", "gpu": "H100-80GB", "num_gpus": "32",
         "tp": "32", "dp": "32", "ep": "32", "input_len": "2048",
         "output_len": "n/a (prefill only)", "num_prompts": "n/s",
         "request_rate_or_concurrency": "saturating", "unit": "tok/s/node",
         "metric": "Prefill (input) token throughput per node",
         "workload": "prefill-only stress test, DeepEP normal dispatch, two-batch overlap, "
                     "DP attention, dense FFN DP (--moe-dense-tp-size 1), EPLB"}


def test_a_prefill_only_wide_ep_row_runs_prefills_with_deepep_per_node():
    """Prefill-only: one output token, the published batch per device, DeepEP, dense DP,
    TBO and EPLB's 32 extra experts; input tokens/s divided by the 4 nodes."""
    spec = express(LMSYS)
    opts = spec.sim_args["ep_options"]
    assert (opts.a2a_backend, opts.dense_tp_size, opts.two_batch_overlap,
            opts.redundant_experts) == ("deepep", 1, True, 32)
    assert (spec.metric, spec.scale) == ("input_throughput", 1 / 4)
    assert (spec.workload.input_len, spec.workload.output_len) == (2048, 1)
    assert spec.sim_args["chunked_prefill_size"] == 16384 * 32


def test_a_decode_only_row_prices_its_fixed_batch_as_one_step():
    """batch=256 per device over 72 ranks: the step of 18432 requests at the KV length,
    batch / step time, per node of 8."""
    row = {**LMSYS, "num_gpus": "72", "tp": "72", "dp": "72", "ep": "72",
           "input_len": "2000 (KV length)", "output_len": "n/s",
           "request_rate_or_concurrency": "batch=256 per device",
           "metric": "Decode (output) token throughput per node",
           "workload": "decode-only stress test, DeepEP low-latency dispatch, CUDA graphs, "
                       "two-batch overlap, DP attention"}
    spec = express(row)
    assert spec.workload.concurrency == 256 * 72 and spec.sim_args["cuda_graph_max_bs"] == 256
    pred = predict(spec.with_cost_model("kernel"))
    assert pred.predicted == pytest.approx(18432 / pred.sim_seconds / 9)


def test_a_closed_loop_of_many_rounds_is_simulated_for_at_most_four():
    """A trace of 16 rounds of a 7168 batch would not fit in memory: 4 are run, and said."""
    spec = express({**ROW, "request_rate_or_concurrency": "conc=7168", "num_prompts": "114688"})
    assert spec.workload.num_prompts == 4 * 7168
    assert any("4 rounds" in a for a in spec.assumptions)


def test_sources_get_short_names_and_fall_in_one_half_each():
    """Every named source is in exactly one half of the split."""
    from experiments.published_check.sources import HALVES, SOURCES

    names = {name for _, name in SOURCES}   # NOTE: a source may be spelled two ways
    assert sorted(names) == sorted(HALVES["A"] + HALVES["B"])
    assert source_name(TRT) == "trt-v0.17" and half_of("trt-v0.17") == "A"


def test_errors_and_medians_are_signed_percentages_of_the_published_value():
    """error = 100 (predicted - published) / published; medians over |error| and signed."""
    specs = [express({**ROW, "id": f"r{i}", "value": "100"}) for i in range(3)]
    preds = [Prediction(f"r{i}", p, 1.0) for i, p in enumerate((90.0, 110.0, 130.0))]
    rows = rows_frame(specs, preds)
    assert rows["error_pct"].tolist() == pytest.approx([-10.0, 10.0, 30.0])
    overall = summary_frame(rows).set_index("set").loc["all"]
    assert (overall["median_abs_error_pct"], overall["median_signed_error_pct"]) == (10.0, 10.0)


def test_a_sharegpt_row_with_published_means_gets_those_means():
    """mean=X lengths: the lognormal mix's medians are set so its means are close to X."""
    spec = express({**ROW, "input_len": "mean=270 (derived)", "output_len": "mean=255 (derived)",
                    "num_prompts": "3000"})
    w = build_workload(spec.workload, vocab_size=32000)
    prompts = [len(r.input_ids) for r in w]
    outputs = [r.sampling_params.max_new_tokens for r in w]
    assert sum(prompts) / len(prompts) == pytest.approx(270, rel=0.1)
    assert sum(outputs) / len(outputs) == pytest.approx(255, rel=0.1)


def test_predict_runs_the_simulator_in_the_published_unit():
    """A one-request row runs end to end; its TTFT in ms is 1000x the run's duration in s."""
    spec = express({**ROW, "model": "meta-llama/Llama-3.1-8B", "tp": "1", "output_len": "1",
                    "num_prompts": "1", "request_rate_or_concurrency": "conc=1",
                    "metric": "Mean first-token latency", "unit": "ms"})
    pred = predict(spec)
    assert pred.row_id == "r1" and 1.0 < pred.predicted < 1e3
    assert pred.predicted == pytest.approx(pred.sim_seconds * 1e3, rel=0.5)


def test_predict_all_returns_the_rows_in_their_order_whatever_order_they_ran():
    """Three rows of 1, 4 and 2 requests run on a pool largest first; the predictions come
    back in the rows' order, each the same as its row's own `predict`."""
    rows = [{**ROW, "id": f"r{n}", "model": "meta-llama/Llama-3.1-8B", "tp": "1",
             "input_len": "16", "output_len": "4", "num_prompts": str(n)} for n in (1, 4, 2)]
    specs = [express(r) for r in rows]
    assert [p.row_id for p in predict_all(specs, 2)] == ["r1", "r4", "r2"]
    assert predict_all(specs, 1) == [predict(s) for s in specs]


def test_each_row_runs_on_its_engine_profile():
    """The engine column picks the profile: TensorRT-LLM rows trt-llm, SGLang sglang."""
    assert express({**ROW, "engine": "tensorrt-llm (pytorch backend)"}
                   ).sim_args["engine_profile"] == "trt-llm"
    assert express({**ROW, "engine": "sglang"}).sim_args["engine_profile"] == "sglang"


def test_an_sglang_row_reads_its_cuda_graph_and_overlap_flags():
    """--disable-cuda-graph and --disable-overlap-schedule in the command reach the run."""
    spec = express({**ROW, "engine": "sglang", "workload": "server: --tp 8 --disable-cuda-graph"})
    assert spec.sim_args["disable_cuda_graph"] is True
    assert "disable_overlap_schedule" not in spec.sim_args
    spec = express({**ROW, "engine": "sglang", "workload": "--disable-overlap-schedule"})
    assert spec.sim_args["disable_overlap_schedule"] is True


def test_a_vllm_row_reads_multi_step_scheduling_and_its_batch_flags():
    """--num-scheduler-step 15 becomes 15 decode steps per pass; --max-num-seqs the running
    cap; --max-num-batched-tokens the prefill chunk."""
    row = {**ROW, "engine": "vllm (ROCm)",
           "workload": "tuned server: -tp 8 --num-scheduler-step 15 --max-num-seqs 1024 "
                       "--max-num-batched-tokens 2048"}
    args = express(row).sim_args
    assert args["engine_profile"].name == "vllm" and args["engine_profile"].scheduler_steps == 15
    assert args["max_running_requests"] == 1024 and args["chunked_prefill_size"] == 2048


def test_trt_llm_max_num_tokens_is_one_ranks_prefill_chunk():
    """TRT-LLM's max_num_tokens 1151 under attention DP: a 1151-token chunk per step, not
    one per rank (the ranks schedule their contexts apart)."""
    row = {**ROW, "engine": "tensorrt-llm", "tp": "8", "dp": "8", "ep": "8",
           "model": "deepseek-ai/DeepSeek-R1",
           "workload": "trtllm-bench throughput, attention DP on, max_batch_size 128 per rank, "
                       "max_num_tokens 1151, CUDA graph batch 128"}
    args = express(row).sim_args
    assert args["chunked_prefill_size"] == args["max_prefill_tokens"] == 1151
    assert args["dp_size"] == 8


def test_trtllm_bench_limits_follow_the_tools_heuristic():
    """Llama-3.1-8B fp16 on one A100-80GB at 128/2048: (74.5 GiB - 15 GiB of weights) x 0.95
    of KV at 0.266 GiB per request is 212 requests: batch 224 (rounded up to 32), tokens
    224 x (1 + 128/2048) = 238, floored at 2048."""
    from experiments.published_check.trtllm_bench_limits import trtllm_bench_limits
    from sim.hardware.lookup import get_hardware
    from sim.model.from_config import get_model_shape

    limits = trtllm_bench_limits(get_model_shape("llama-3.1-8b"), get_hardware("a100-80g"), 1,
                                 128, 2048)
    assert limits == (224, 2048)


def test_a_trtllm_bench_row_without_printed_limits_gets_the_heuristics():
    """No max_batch_size / max_num_tokens in the row: the running cap and chunk come from
    trtllm-bench's own heuristic (batch per rank times the attention ranks)."""
    row = {**ROW, "engine": "tensorrt-llm", "workload": "trtllm-bench throughput, synthetic"}
    args = express(row).sim_args
    assert args["max_running_requests"] >= 64 and args["chunked_prefill_size"] >= 2048


def test_the_summary_has_a_median_per_engine_profile():
    """Rows on trt-llm and on vllm each get their own median line."""
    specs = [express({**ROW, "id": "t", "engine": "tensorrt-llm", "value": "100"}),
             express({**ROW, "id": "v", "engine": "vllm (ROCm)", "value": "100",
                      "workload": "--num-scheduler-step 8"})]
    rows = rows_frame(specs, [Prediction("t", 110.0, 1.0), Prediction("v", 80.0, 1.0)])
    assert rows["engine"].tolist() == ["trt-llm", "vllm"]
    summary = summary_frame(rows).set_index("set")
    assert summary.loc["engine: trt-llm", "median_signed_error_pct"] == pytest.approx(10.0)
    assert summary.loc["engine: vllm", "median_signed_error_pct"] == pytest.approx(-20.0)


MLPERF = {**ROW, "source": "github:mlcommons/inference_results_v5.1 closed/NVIDIA/results/"
          "B200-SXM-180GBx8_TRT/README.md", "model": "meta-llama/Llama-3.1-8B-Instruct",
          "gpu": "B200-SXM-180GB", "num_gpus": "8", "tp": "n/s", "dp": "n/s", "ep": "1",
          "precision": "nvfp4 (per NVIDIA announcement)", "input_len": "dataset:cnn-dailymail",
          "output_len": "dataset", "num_prompts": "LoadGen-chosen",
          "request_rate_or_concurrency": "offline", "metric": "Tokens per second"}


def test_replicas_run_one_engine_with_its_share_and_scale_its_throughput():
    """dp 8 at tp 1: one engine is simulated with an eighth of the prompts and of the
    arrival rate, its throughput counted 8 times."""
    spec = express({**ROW, "tp": "1", "dp": "8"})
    assert spec.scale == 8 and spec.sim_args["tp"] == 1 and "dp_size" not in spec.sim_args
    assert spec.workload.num_prompts == 3000 // 8 and math.isinf(spec.workload.rate)
    assert any("8 independent engines" in a for a in spec.assumptions)
    spec = express({**ROW, "tp": "1", "dp": "8", "request_rate_or_concurrency": "rate=16"})
    assert spec.workload.rate == 2.0 and spec.scale == 8


def test_an_mlperf_row_takes_its_submitters_layout_and_dataset_lengths():
    """The harness config gives TP 1 (so 8 engines), the batch cap, the step budget and the
    fp8 KV; the lengths follow the CNN/DailyMail set's means."""
    spec = express(MLPERF)
    assert spec.scale == 8 and spec.sim_args["tp"] == 1
    assert (spec.sim_args["max_running_requests"], spec.sim_args["chunked_prefill_size"],
            spec.sim_args["kv_cache_dtype"]) == (6000, 12000, "fp8_e4m3")
    w = build_workload(spec.workload, vocab_size=32000)
    prompts = [len(r.input_ids) for r in w]
    outputs = [r.sampling_params.max_new_tokens for r in w]
    assert sum(prompts) / len(prompts) == pytest.approx(870.73, rel=0.03)
    assert sum(outputs) / len(outputs) == pytest.approx(81.63, rel=0.03)
    assert max(prompts) <= 2540


def test_an_mlperf_server_row_runs_at_the_submissions_target_qps():
    """The AMD Mixtral Server run: user.conf's target QPS (335) spread over 8 TP1 engines,
    the server yaml's limits, 10 scheduler steps and eager mode."""
    row = {**MLPERF, "source": "github:mlcommons/inference_results_v5.1 closed/AMD/results/"
           "8xMI300X_2xEPYC_9575F/README.md", "model": "mistralai/Mixtral-8x7B-Instruct-v0.1",
           "gpu": "MI300X-192GB", "tp": "1", "dp": "8", "engine": "vllm (ROCm fork)",
           "precision": "fp8 weights + fp8 KV", "input_len": "dataset:mlperf-mixtral-15k",
           "output_len": "mean~145 (reference)",
           "request_rate_or_concurrency": "server (target QPS not in the summary page)"}
    spec = express(row)
    assert spec.scale == 8 and spec.workload.rate == pytest.approx(335 / 8)
    assert (spec.sim_args["max_running_requests"], spec.sim_args["disable_cuda_graph"],
            spec.sim_args["engine_profile"].scheduler_steps) == (2560, True, 10)
    assert "online throughput" in spec.groups
    offline = express({**row, "request_rate_or_concurrency": "offline"})
    assert math.isinf(offline.workload.rate) and offline.sim_args["max_running_requests"] == 4736


def test_a_submitters_pipeline_parallel_layout_is_refused_by_name():
    """Llama-3.1-405B runs TP2 x PP2 in the submission: pipeline parallelism is not modelled."""
    out = express({**MLPERF, "model": "meta-llama/Llama-3.1-405B-Instruct",
                   "input_len": "dataset:mlperf-llama3.1-405b"})
    assert isinstance(out, Unexpressed) and "pipeline parallelism 2" in out.reason


def test_every_held_out_row_is_expressed():
    """The held-out TensorRT-LLM online cells all become simulator runs (none refused)."""
    import csv
    from pathlib import Path

    path = Path(__file__).parents[1] / "experiments/published_check/holdout/trt014_online_low_qps.csv"
    with path.open() as f:
        specs = [express(row) for row in csv.DictReader(f)]
    assert len(specs) == 79
    assert not [s for s in specs if isinstance(s, Unexpressed)]
    assert {s.sim_args["hardware"] for s in specs} == {"h100", "h200"}


@pytest.mark.parametrize("version, source, v1", [
    ("0.6.2", "", False), ("0.7.3", "", False), ("0.8.5.post1", "", True),
    ("v0.10.0", "", True), ("0.19.1 (inferred from Table 3)", "", True),
    ("not pinned (main, ~2026-06-01)", "", True), ("not pinned", "pull/23696 (2025-08-28)", True),
    ("not pinned", "", False)])
def test_a_vllm_row_runs_v1_from_0_8_or_when_dated_2025_on(version, source, v1):
    """vLLM's V1 engine is the default from 0.8.0; an unversioned row counts as V1 when its
    version, source or caveat is dated 2025 or later."""
    row = {**ROW, "engine": "vllm", "engine_version": version, "source": source or TRT}
    profile = get_engine_profile(express(row).sim_args["engine_profile"])
    assert (profile.name == "vllm-v1") is v1


@pytest.mark.parametrize("gpu, workload, budget, seqs", [
    ("H100-SXM5-80GB", "vllm bench serve --max-concurrency 64", 8192, 1024),
    ("H100-SXM5-80GB", "vllm bench throughput --input-len 1024", 16384, 1024),
    ("A100-SXM4-80GB", "vllm bench serve", 2048, 256),
    ("A100-SXM4-80GB", "LLM(model=...) offline", 8192, 256),
    ("H200-141GB", "vllm serve --max-num-batched-tokens 4096 --max-num-seqs 512", 4096, 512)])
def test_a_vllm_v1_row_shares_a_token_budget_between_decodes_and_a_prefill_chunk(
        gpu, workload, budget, seqs):
    """V1's defaults (EngineArgs.get_batch_defaults: by GPU and entry point) unless the
    command sets --max-num-batched-tokens / --max-num-seqs; every step mixes decodes and a
    prefill chunk within the budget."""
    row = {**ROW, "engine": "vllm", "engine_version": "0.10.1", "gpu": gpu, "workload": workload}
    args = express(row).sim_args
    assert (args["chunked_prefill_size"], args["max_prefill_tokens"]) == (budget, budget)
    assert args["enable_mixed_chunk"] is True and args["max_running_requests"] == seqs
    assert args["engine_profile"].overlap is False


def test_a_vllm_v1_row_with_async_scheduling_overlaps_its_cpu():
    row = {**ROW, "engine": "vllm", "engine_version": "0.11.0",
           "workload": "vllm serve --async-scheduling"}
    profile = express(row).sim_args["engine_profile"]
    assert profile.name == "vllm-v1" and profile.overlap is True


@pytest.mark.parametrize("precision, quantization, kv", [
    ("mxfp4 MoE weights (native checkpoint); KV bf16", "mxfp4", "auto"),
    ("bf16 weights; KV fp8 e4m3", "none", "fp8_e4m3"),
    ("fp8 (weights, activations; KV cache fp8)", "fp8", "fp8_e4m3")])
def test_the_precision_cell_names_the_weight_format_and_the_kv_dtype(precision, quantization, kv):
    args = express({**ROW, "precision": precision, "model": "openai/gpt-oss-20b"}).sim_args
    assert (args["quantization"], args["kv_cache_dtype"]) == (quantization, kv)


def test_an_h100_nvl_card_is_refused_not_read_as_the_sxm_part():
    spec = express({**ROW, "gpu": "H100-NVL-94GB"})
    assert isinstance(spec, Unexpressed) and "H100-NVL-94GB" in spec.reason


@pytest.mark.parametrize("engine, version, counted", [
    ("vllm", "0.10.1", True), ("vllm", "0.6.2", False),
    ("sglang", "0.5.8.post1", True), ("sglang", "main at PR #9359 (between v0.5.0rc2 and v0.5.1)", True),
    ("sglang", "main, ~May 2025 (PD + large-scale EP)", False), ("sglang", "v0.4.1", False),
    ("tensorrt-llm", "1.0", False)])
def test_the_2025_26_group_holds_vllm_v1_and_sglang_0_5_runs(engine, version, counted):
    row = {**ROW, "engine": engine, "engine_version": version}
    assert ("2025-26 engines" in express(row).groups) is counted


@pytest.mark.parametrize("inp, out, low, high", [
    ("mean=20000 (approx, +-15%)", "mean=2000 (approx, +-15%)", (17000, 1700), (23000, 2300)),
    ("1024 ±10%", "512 ±10%", (922, 461), (1126, 563))])
def test_a_stated_length_spread_runs_as_uniform_lengths_within_it(inp, out, low, high):
    """'~20k input, ~2k output, +-15%' is vLLM's random dataset at a 0.15 range ratio:
    lengths uniform in [L(1 - r), L(1 + r)], not the heavy-tailed ShareGPT-like mix."""
    spec = express({**ROW, "input_len": inp, "output_len": out})
    w = spec.workload
    assert (w.input_dist.low, w.output_dist.low) == low
    assert (w.input_dist.high, w.output_dist.high) == high
    assert not w.sharegpt and any("uniform" in a for a in spec.assumptions)
    plain = express({**ROW, "input_len": "mean=20000", "output_len": "mean=2000"}).workload
    assert plain.sharegpt and plain.input_dist is None


def test_a_closed_loop_ttft_counts_from_when_the_client_sent_the_request():
    """Two slots, four requests: the third and fourth are sent at the first two finishes, so
    their TTFTs count from there, not from t=0."""
    import pandas as pd

    from experiments.published_check.predict import closed_loop_ttft

    runs = pd.DataFrame({"first_token_time": [1.0, 1.0, 11.0, 12.0],
                         "finish_time": [10.0, 10.5, 20.0, 21.0]})
    assert closed_loop_ttft(runs, 2, "ttft_mean") == pytest.approx((1 + 1 + 1 + 1.5) / 4)
    assert closed_loop_ttft(runs, 2, "ttft_p50") == pytest.approx(1.0)
    assert closed_loop_ttft(runs, 4, "ttft_mean") == pytest.approx((1 + 1 + 11 + 12) / 4)


def test_the_added_2025_26_rows_have_the_sets_columns_unique_ids_and_named_sources():
    """experiments/published_check/data/runs_2025_26.csv: the calibration set's columns, ids
    unique, every value a number, every source a short name in one half (not the fallback),
    every engine vLLM V1 or SGLang 0.5 (the '2025-26 engines' group)."""
    import pandas as pd

    from experiments.published_check.__main__ import ADDED_CSV
    from experiments.published_check.express import is_2025_engine
    from experiments.published_check.sources import HALVES

    table = pd.read_csv(ADDED_CSV, dtype=str, keep_default_na=False)
    assert list(table.columns) == list(ROW_COLUMNS)
    assert table["id"].is_unique and len(table) >= 40
    assert pd.to_numeric(table["value"].str.replace(",", ""), errors="coerce").notna().all()
    named = set(HALVES["A"] + HALVES["B"])
    assert all(source_name(s) in named for s in table["source"])
    assert all(is_2025_engine(row) for row in table.to_dict("records"))


@pytest.mark.parametrize("engine, flag", [("vllm", "--gpu-memory-utilization 0.85"),
                                          ("sglang", "--mem-fraction-static 0.85")])
def test_a_rows_memory_flag_sets_its_engines_share_of_the_gpu(engine, flag):
    """vLLM's --gpu-memory-utilization and SGLang's --mem-fraction-static become the
    profile's memory_fraction; a row without one keeps the profile's default."""
    row = {**ROW, "engine": engine, "engine_version": "0.10.1", "workload": f"serve {flag}"}
    profile = express(row).sim_args["engine_profile"]
    assert profile.memory_fraction == 0.85
    plain = express({**row, "workload": "serve"}).sim_args["engine_profile"]
    assert getattr(plain, "memory_fraction", None) != 0.85


def test_a_dataset_rows_own_mean_output_recentres_the_datasets_outputs():
    """An MLPerf row whose output cell gives the run's mean ('derived mean=129.0 (...)')
    draws outputs with that mean and the dataset's log spread, not the dataset reference's
    mean; the input lengths stay the dataset's; notes after the dataset name are ignored."""
    row = {**ROW, "model": "meta-llama/Llama-3.1-8B", "tp": "1",
           "input_len": "dataset:cnn-dailymail (per-sample table)",
           "output_len": "derived mean=129.0 (5103.99 / 39.56)", "num_prompts": "1000"}
    w = express(row).workload
    out, inp = w.output_dist, w.input_dist
    assert out.median * math.exp(out.sigma ** 2 / 2) == pytest.approx(129.0)
    assert out.sigma == pytest.approx(0.372)
    assert inp.median * math.exp(inp.sigma ** 2 / 2) == pytest.approx(870.73)
    reference = express({**row, "output_len": "dataset"}).workload.output_dist
    assert reference.median * math.exp(reference.sigma ** 2 / 2) == pytest.approx(81.63)


def test_a_config_files_flags_and_a_long_prompt_dataset_are_read():
    """A vLLM V1 row's flags written as a YAML config writes them (max_num_seqs 1792,
    max_num_batched_tokens 65536, async_scheduling) set the cap, the budget and overlap; an
    MLPerf gpt-oss row runs at most DATASET_PROMPT_TOKENS of its set's prompts per engine."""
    from experiments.published_check.requests import DATASET_PROMPT_TOKENS

    row = {**ROW, "engine": "vllm", "engine_version": "0.14.1", "model": "openai/gpt-oss-120b",
           "precision": "mxfp4", "gpu": "MI355X-288GB", "num_gpus": "8", "tp": "1", "dp": "8",
           "workload": "AMD harness: max_num_batched_tokens 65536, max_num_seqs 1792, "
                       "async_scheduling, gpu_memory_utilization 0.96",
           "input_len": "dataset:mlperf-gpt-oss-120b (perf_eval_ref, 6396 samples)",
           "output_len": "derived mean=1373.5 (95004 / 69.1714)", "num_prompts": "185484"}
    spec = express(row)
    args = spec.sim_args
    assert (args["max_running_requests"], args["chunked_prefill_size"]) == (1792, 65536)
    assert args["engine_profile"].overlap and args["engine_profile"].memory_fraction == 0.96
    assert spec.workload.num_prompts == int(DATASET_PROMPT_TOKENS // 5010.64) < 185484 // 8
    out = spec.workload.output_dist
    assert out.median * math.exp(out.sigma ** 2 / 2) == pytest.approx(1373.5)
