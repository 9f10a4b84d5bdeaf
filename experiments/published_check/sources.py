"""Short names for the calibration set's sources, and the fixed split of sources into two
halves (`HALVES`): parameters fitted on one half are reported on the other, so the check
cannot pass by fitting the rows it reports."""

from __future__ import annotations

# substring of the `source` column -> short name, most specific first
SOURCES = (("Online Serving Measurements", "trt-v0.14-online"),
           ("@258c7540", "trt-v0.17"), ("@00f37686", "trt-v1.0"),
           ("Best_perf_practice_on_DeepSeek-R1", "trt-dsr1-blog"),
           ("lmdeploy", "lmdeploy"), ("large-scale-ep", "lmsys-ep-blog"),
           ("benchmark_dsv3", "sglang-dsv3"), ("B200-SXM-180GBx8_TRT", "mlperf-nvidia"),
           ("8xMI300X", "mlperf-amd"), ("vllm-serving-amd", "vllm-mi300x-blog"),
           ("fp8-kvcache", "vllm-fp8kv-blog"), ("vllm-project/recipes", "vllm-recipes"),
           ("closed/RedHat", "mlperf-redhat"), ("performance-results", "amd-perf-page"),
           ("vllm-project/vllm pull/", "vllm-prs"), ("sgl-project/sglang pull/", "sglang-prs"),
           ("vllm-project/vllm/pull/", "vllm-prs"), ("sgl-project/sglang/pull/", "sglang-prs"),
           ("open/Krai", "mlperf-krai"), ("ai-bot-pro/achatbot", "achatbot-pr"),
           ("inference_results_v6.", "mlperf-v6"), ("llm-d/llm-d", "llmd-docs"))
# NOTE: each half mixes engines, GPUs, dense and MoE, offline and online rows; a source is
# put in a half when it joins the set, before its rows are simulated.
HALVES = {"A": ("trt-v0.17", "lmdeploy", "lmsys-ep-blog", "vllm-mi300x-blog", "mlperf-amd",
                "vllm-fp8kv-blog", "mlperf-redhat", "amd-perf-page", "mlperf-krai",
                "achatbot-pr", "mlperf-v6"),
          "B": ("trt-v0.14-online", "trt-v1.0", "trt-dsr1-blog", "sglang-dsv3",
                "mlperf-nvidia", "vllm-recipes", "vllm-prs", "sglang-prs", "llmd-docs")}


def source_name(source: str) -> str:
    """The short name of a `source` cell; the cell itself when no rule matches."""
    for part, name in SOURCES:
        if part in source:
            return name
    return source


def half_of(name: str) -> str:
    """"A" or "B": the half a source (short name) belongs to."""
    return next((h for h, names in HALVES.items() if name in names), "B")
