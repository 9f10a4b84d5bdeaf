"""`trtllm_bench_limits(...)`: the max_batch_size and max_num_tokens `trtllm-bench throughput`
picks itself when a run does not set them, as TRT-LLM's own heuristic computes them
(`tensorrt_llm/bench/build/tuning.py`, `calc_engine_setting` and `finetune_setting`):

    KV bytes per token = 2 * layers * max(tp, kv heads) * head dim * KV bytes (GiB)
    requests = (GPU memory * tp - weights) * 0.95 / (KV bytes per token * (ISL + OSL))
    batch    = min(requests, 4096), rounded up (to 32 with a floor of 64 below 256, to 128
               below 1024, else to 256)
    tokens   = min(batch * (1 + ISL / OSL), 32768), rounded up (to 256 with a floor of 2048
               below 4096, to 512 below 8192, else to 1024)

Our own arithmetic from that published rule, not TRT-LLM's code; GPU memory is the
catalogue's capacity in GiB.
"""

from __future__ import annotations

import math
from typing import NamedTuple

KV_FRACTION = 0.95   # trtllm-bench's default kv_cache_free_gpu_mem_fraction
MAX_BATCH = 4096
MAX_TOKENS = 32768
GIB = 2 ** 30


class BenchLimits(NamedTuple):
    max_batch_size: int
    max_num_tokens: int


def trtllm_bench_limits(model, hardware, tp: int, input_len: int, output_len: int
                        ) -> BenchLimits:
    """The heuristic's limits for `model` (a `sim.model.shape.ModelShape`, its dtypes set)
    on tp GPUs of `hardware`, for fixed ISL / OSL."""
    kv_bytes = 1 if model.kv_dtype.startswith("fp8") else 2
    per_token = 2 * model.num_layers * max(tp, model.num_kv_heads) * model.head_dim * kv_bytes / GIB
    weights = model.param_count * model.weight_bytes_per_param / GIB
    cache = (hardware.mem_capacity / GIB * tp - weights) * KV_FRACTION
    requests = cache / (per_token * (input_len + output_len))
    batch = min(requests, MAX_BATCH)
    tokens = min(batch * (1 + input_len / output_len), MAX_TOKENS)
    return BenchLimits(_round_batch(batch), _round_tokens(tokens))


def _round_batch(batch: float) -> int:
    if batch < 256:
        return max(64, 32 * math.ceil(batch / 32))
    step = 128 if batch < 1024 else 256
    return step * math.ceil(batch / step)


def _round_tokens(tokens: float) -> int:
    if tokens < 4096:
        return max(2048, 256 * math.ceil(tokens / 256))
    step = 512 if tokens < 8192 else 1024
    return step * math.ceil(tokens / step)
