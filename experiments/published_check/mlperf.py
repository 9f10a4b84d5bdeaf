"""MLPerf Inference rows (sources `mlperf-amd`, `mlperf-nvidia`): what their result pages
leave out, read from the files the submissions and the benchmarks point to.

- `DATASETS`: each benchmark dataset's per-sample token lengths, summarised (samples, mean,
  median, max, and the standard deviation of log length) from the per-sample length tables in
  openshift-psap/performance-dashboard `mlperf-data/summaries/*.csv` @ 71007029 (input and
  output token counts of every sample of the MLPerf dataset files). Their output means equal
  MLPerf's reference `tokens_per_sample` (Mixtral 144.84, Llama-3.1-405B 684.68:
  mlcommons/inference `language/*/README.md`), which is how we know the tables are those
  datasets. A run draws lengths from a lognormal with the dataset's log spread whose mean is
  the dataset's mean, clipped at its maximum.
- `LAYOUTS`: the submitter's engine layout for a (source, model, scenario), from its harness
  configuration (tensor and pipeline parallelism, the running-request cap, the step's token
  budget, a Server run's target QPS). `gpus / (tp * pp)` engines share the system; a run
  spreads the samples (Offline) or the arrivals (Server) evenly over them, so one engine is
  simulated and its throughput multiplied by their count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

_LENGTHS = ("openshift-psap/performance-dashboard mlperf-data/summaries/{} @ 71007029 "
            "(per-sample input/output token counts)")
_NVIDIA = ("mlcommons inference_results_v5.1 closed/NVIDIA/configs/B200-SXM-180GBx8/Offline/{} "
           "(read from the fork ykamiset/inference_results_v5.1 @ e9ccad4d)")
_AMD = ("mlcommons inference_results_v5.1 closed/AMD/code/mixtral-8x7b/harness_llm/models/"
        "mixtral-8x7b/{}_mi325x.yaml (read from the mirror ntuhpc/inference_results_v5.1 "
        "@ a634ab77; the MI300X run assumed to use it, as the row's caveat says)")
# NOTE: the gpt-oss set's table has input lengths only; its outputs are the model's own
# (reasoning effort low), so a run's output cell gives its measured mean (requests.py).
_GPT_OSS = ("inputs: openshift-psap/performance-dashboard datasets/summaries/gpt-oss.csv @ "
            "71007029 (6396 samples' input_length); outputs: mean 1278.20, mlcommons/inference "
            "compliance/TEST09/gpt-oss-120b/audit.config @ b66003e1 ('reference mean-OSL'); log "
            "spread 0.205 and max 3789: the nine MLPerf v6.0/v6.1 runs' TEST09 "
            "verify_output_len.txt (cv 0.203-0.211 of the 6396 outputs, max 2628-3789), "
            "moment-matched to a lognormal: an estimate (experiments/published_check/data/"
            "gptoss_mlperf_facts.md)")
_AMD_QPS = ("closed/AMD/code/mixtral-8x7b/user_mi300x.conf (same mirror): "
            "mixtral-8x7b.Server.target_qps = 335")


@dataclass(frozen=True)
class LengthSummary:
    """One side (input or output) of a dataset's per-sample token lengths."""

    mean: float
    log_sigma: float   # standard deviation of log(length)
    max_len: int

    def lognormal(self):
        """A lognormal with this spread whose mean is `mean`, clipped at `max_len`."""
        from shared.workload.length_dist import LogNormal

        return LogNormal(self.mean * math.exp(-self.log_sigma ** 2 / 2), self.log_sigma,
                         self.max_len)


@dataclass(frozen=True)
class DatasetLengths:
    samples: int
    input: LengthSummary
    output: LengthSummary
    source: str


DATASETS = {
    "dataset:mlperf-mixtral-15k": DatasetLengths(
        15000, LengthSummary(427.39, 0.830, 1948), LengthSummary(144.84, 0.688, 1024),
        _LENGTHS.format("mixtral-8x7b.csv")),
    "dataset:cnn-dailymail": DatasetLengths(
        13368, LengthSummary(870.73, 0.504, 2540), LengthSummary(81.63, 0.372, 2135),
        _LENGTHS.format("llama3-1-8b-datacenter.csv")),
    "dataset:mlperf-llama3.1-405b": DatasetLengths(
        8313, LengthSummary(9428.64, 0.558, 19988), LengthSummary(684.68, 0.583, 1830),
        _LENGTHS.format("llama3-1-405b.csv")),
    "dataset:mlperf-gpt-oss-120b": DatasetLengths(
        6396, LengthSummary(5010.64, 0.4455, 15330), LengthSummary(1278.20, 0.205, 3789),
        _GPT_OSS),
    "dataset:mlperf-deepseek-r1": DatasetLengths(
        4388, LengthSummary(803.79, 0.868, 3140), LengthSummary(4043.45, 1.038, 32768),
        _LENGTHS.format("deepseek-r1.csv")),
}


@dataclass(frozen=True)
class SubmitterLayout:
    """One engine of a submission: its parallelism and the simulator keywords of its batch
    limits (`sim_args`), with the configuration it was read from."""

    tp: int
    source: str
    pp: int = 1
    sim_args: dict[str, Any] = field(default_factory=dict)
    refused: str = ""   # why the run cannot be simulated although its layout is known
    target_qps: float | None = None   # a Server run's Poisson arrival rate, whole system


def _vllm_steps(steps: int):
    from sim.cost.engine_profile import get_engine_profile

    return get_engine_profile("vllm").with_scheduler_steps(steps)


LAYOUTS = {
    ("mlperf-nvidia", "llama-3.1-8b", "offline"): SubmitterLayout(
        1, _NVIDIA.format("llama3_1-8b.py: tensor_parallelism 1, gpu_batch_size 6000, "
                          "max_num_tokens 12000, chunked context, kv_cache_dtype fp8"),
        sim_args={"max_running_requests": 6000, "chunked_prefill_size": 12000,
                  "max_prefill_tokens": 12000, "kv_cache_dtype": "fp8_e4m3"}),
    ("mlperf-nvidia", "llama-3.1-405b", "offline"): SubmitterLayout(
        2, _NVIDIA.format("llama3_1-405b.py: tensor_parallelism 2, pipeline_parallelism 2"),
        pp=2),
    ("mlperf-nvidia", "deepseek-v3", "offline"): SubmitterLayout(
        8, _NVIDIA.format("deepseek-r1.py: tensor_parallelism 8, moe_expert_parallelism 8, "
                          "enable_attention_dp, max_num_tokens 4608, offline_expected_qps 10"),
        refused=("its dataset's outputs run to 32,768 tokens (mean 4,043) and the offline run "
                 "is about 6,000 of them (offline_expected_qps 10 x LoadGen's 600 s): their "
                 "step trace would not fit in this machine's memory (8 rounds of the "
                 "1K/2K DeepSeek-R1 blog row already took 20 GB)")),
    ("mlperf-amd", "mixtral-8x7b", "offline"): SubmitterLayout(
        1, _AMD.format("offline") + ": tensor_parallel_size 1, max_num_seqs 4736, "
        "max_num_batched_tokens 51200, enable_chunked_prefill False, num_scheduler_steps 13, "
        "kv_cache_dtype fp8",
        sim_args={"max_running_requests": 4736, "kv_cache_dtype": "fp8_e4m3",
                  "chunked_prefill_size": None, "max_prefill_tokens": 51200,
                  "engine_profile": _vllm_steps(13)}),
    ("mlperf-amd", "mixtral-8x7b", "server"): SubmitterLayout(
        1, _AMD.format("server") + ": tensor_parallel_size 1, max_num_seqs 2560, "
        "max_num_batched_tokens 32000, enable_chunked_prefill False, num_scheduler_steps 10, "
        "enforce_eager True, kv_cache_dtype fp8; " + _AMD_QPS,
        sim_args={"max_running_requests": 2560, "kv_cache_dtype": "fp8_e4m3",
                  "chunked_prefill_size": None, "max_prefill_tokens": 32000,
                  "engine_profile": _vllm_steps(10), "disable_cuda_graph": True},
        target_qps=335.0),
}


def dataset_lengths(input_len: str) -> DatasetLengths | None:
    """The summary of a `dataset:<name> (notes)` input-length cell, None for other cells."""
    words = input_len.split()
    return DATASETS.get(words[0]) if words else None


def submitter_layout(source: str, model: str, arrivals: str) -> SubmitterLayout | None:
    """The layout of `model` (an embedded model key) in the submission `source` (a short
    source name) for the scenario of an `arrivals` cell ("offline", "server ..."), None when
    no harness configuration was read for it."""
    return LAYOUTS.get((source, model, "server" if arrivals.startswith("server") else "offline"))
