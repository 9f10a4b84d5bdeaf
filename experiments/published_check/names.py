"""The calibration set's names for models, GPUs and metrics, and the simulator's keys for
them (`experiments.published_check.express` reads a row through these tables)."""

from __future__ import annotations

# Hugging Face repo (lower case, substring) -> embedded model key, most specific first.
MODELS = (("gpt-oss-120b", "gpt-oss-120b"), ("gpt-oss-20b", "gpt-oss-20b"),
          ("qwen3-32b", "qwen3-32b"), ("qwen3-8b", "qwen3-8b"),
          ("llama-4-maverick", "llama-4-maverick"), ("deepseek-r1", "deepseek-v3"), ("deepseek-v3", "deepseek-v3"),
          ("qwen3-235b-a22b", "qwen3-235b-a22b"), ("qwen3-30b-a3b", "qwen3-30b-a3b"),
          ("mixtral-8x22b", "mixtral-8x22b"), ("mixtral-8x7b", "mixtral-8x7b"),
          ("llama-3.1-405b", "llama-3.1-405b"), ("llama-3.1-70b", "llama-3.1-70b"),
          ("llama-3.3-70b", "llama-3.1-70b"), ("llama-3.1-8b", "llama-3.1-8b"),
          ("llama-2-70b", "llama-2-70b"), ("llama-2-13b", "llama-2-13b"),
          ("llama-2-7b", "llama-2-7b"))
# NOTE: a GPU name prefix -> its catalogue key, None: a part the catalogue lacks (the H100
# NVL and PCIe cards differ from the SXM part in memory, bandwidth and clocks)
HARDWARE = (("H100-NVL", None), ("H100-PCIe", None), ("A100", "a100-80g"), ("H100", "h100"), ("H200", "h200"), ("B200", "b200"),
            ("MI300X", "mi300x"), ("MI325X", "mi325x"), ("MI355X", "mi355x"))
THROUGHPUT = {"Output token throughput (whole system)", "Output token throughput",
              "Output token throughput (offline)", "Completed tokens per second",
              "Total output token throughput", "Tokens per second"}
# metric -> (RunResult summary key, scale to the published unit)
METRICS = {**{m: ("output_throughput", 1.0) for m in THROUGHPUT},
           "Request throughput": ("request_throughput", 1.0),
           "Mean TTFT": ("ttft_mean", 1e3), "Mean first-token latency": ("ttft_mean", 1e3),
           "Mean ITL": ("itl_mean", 1e3), "Median TPOT": ("tpot_p50", 1e3),
           "Median TTFT": ("ttft_p50", 1e3), "Median ITL": ("itl_p50", 1e3),
           "Prefill (input) token throughput per node": ("input_throughput", 1.0),
           "Decode (output) token throughput per node": ("decode_throughput", 1.0)}
