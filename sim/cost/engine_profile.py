"""`EngineProfile`: the CPU side of a named serving engine, as the kernel cost model prices
it, the schedule it runs by default, and the kernel choices its published runs document.

- `cpu_per_step` / `cpu_per_request`: host seconds of one scheduling pass (receive,
  schedule, build the batch's metadata, sample, process the results), fixed and per request
  in the batch.
- `overlap`: the engine's default schedule. Under overlap the CPU work of the next step runs
  while the device computes this one (SGLang's overlap scheduler, TRT-LLM's PyTorch-backend
  overlap scheduler), so a step costs max(device, CPU); without it, device + CPU.
- `guaranteed_no_evict`: the engine admits a request only when the KV of every running
  request's whole output is guaranteed (TensorRT-LLM's default capacity policy), instead of
  SGLang's decaying estimate with retraction (`shared.loop.new_token_ratio`).
- `scheduler_steps`: decode steps per scheduling pass (vLLM's `--num-scheduler-steps`,
  multi-step scheduling): a decode step pays 1 / scheduler_steps of the pass. NOTE: only the
  CPU saving is modelled; vLLM admitting new requests only between passes is not.
- `fp8_attention`: with an fp8 KV cache the decode attention quantizes its queries to fp8
  and runs on the fp8 tensor cores, so where it is compute-bound (MLA's absorbed heads) it
  runs at the fp8 rate; prefill attention stays 16-bit.
- `fp4_moe_gather`: under attention DP an NVFP4 MoE's input is all-gathered already
  quantized (4-bit values and their scales) and its output reduce-scattered in 16 bits,
  instead of one 16-bit all-reduce.

- `swa_full_tokens_ratio`: a model with sliding-window layers keeps their KV in a pool of
  this many tokens per token of the full layers' pool (SGLang's `--swa-full-tokens-ratio`;
  tokens past the window are freed from it), so the KV capacity, counted in full-layer
  tokens, pays each sliding layer this fraction of a token (`sim.model.kv_capacity`). None:
  every layer holds every token.
- `kv_free_fraction`: the KV pool takes this fraction of the memory left after the weights
  (TensorRT-LLM's `free_gpu_memory_fraction`), instead of the capacity less a fixed share of
  the whole GPU less the weights (SGLang's `mem_fraction_static` and vLLM's
  `gpu_memory_utilization` are fractions of the whole GPU). None: the latter.
- `memory_fraction`: the weights and the KV pool together take this share of the GPU's
  memory (vLLM's `--gpu-memory-utilization`, SGLang's `--mem-fraction-static`); None: the
  simulator's default reserve (`sim.model.kv_capacity.DEFAULT_RESERVE_FRACTION`).
- `version`: the engine release the profile models (a run's trace header names it): vLLM's
  V0 engine (0.6, `vllm`) and its V1 engine (0.8 on, `vllm-v1`: a persistent batch and a
  scheduler of SGLang's design, every step a token budget that the running decodes and a
  prefill chunk share: see `V1_BATCH_DEFAULTS` for the budget and cap it starts from).

Profiles are registered by name in `ENGINE_PROFILES` (one entry per engine); each number
says where it comes from in `SOURCES`. Launch costs (CUDA graph replay, eager launches) are
the GPU driver's, the same for every engine: `sim.cost.kernel.params`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.hardware.hardware import Hardware


@dataclass(frozen=True)
class EngineProfile:
    name: str
    cpu_per_step: float      # s per scheduling pass
    cpu_per_request: float   # s per request in the batch, per pass
    overlap: bool            # the engine's default: CPU hidden under the device
    scheduler_steps: int = 1   # decode steps per scheduling pass (vLLM multi-step)
    guaranteed_no_evict: bool = False  # admission reserves every running request's output
    fp8_attention: bool = False    # fp8 KV cache: decode attention on fp8 tensor cores
    fp4_moe_gather: bool = False   # attention DP: an NVFP4 MoE's input gathered in NVFP4
    version: str = ""              # the engine release modelled (module doc)
    token_budget: bool = False     # vLLM V1: one token budget per step (`schedule_defaults`)
    swa_full_tokens_ratio: float | None = None   # sliding layers' KV tokens per full layer's
    kv_free_fraction: float | None = None   # KV pool: this share of the memory the weights leave
    memory_fraction: float | None = None    # weights + KV pool: this share of the GPU's memory

    def __post_init__(self) -> None:
        for name in ("cpu_per_step", "cpu_per_request"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"EngineProfile.{name} must be a finite number >= 0 "
                                 f"(seconds), got {value!r}")
        for name in ("overlap", "guaranteed_no_evict", "fp8_attention", "fp4_moe_gather"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"EngineProfile.{name} must be a bool, "
                                 f"got {getattr(self, name)!r}")
        for name in ("swa_full_tokens_ratio", "kv_free_fraction", "memory_fraction"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 < value <= 1):
                raise ValueError(f"EngineProfile.{name} must be in (0, 1] or None, got {value!r}")
        steps = self.scheduler_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"scheduler_steps (--num-scheduler-steps) must be an int >= 1, "
                             f"got {steps!r}")

    def cpu_time(self, requests: int, decode: bool) -> float:
        """Host seconds one step of `requests` requests pays for scheduling (a decode step
        its 1 / scheduler_steps share of a pass)."""
        seconds = self.cpu_per_step + self.cpu_per_request * requests
        return seconds / self.scheduler_steps if decode else seconds

    def with_scheduler_steps(self, steps: int) -> EngineProfile:
        """This profile with `steps` decode steps per scheduling pass."""
        return dataclasses.replace(self, scheduler_steps=steps)

    def schedule_defaults(self, hardware: Hardware, offline: bool = False) -> dict[str, Any]:
        """EngineConfig fields the engine's own defaults set on `hardware`, beyond overlap and
        admission: for a `token_budget` engine (vLLM V1) every step one budget of
        max_num_batched_tokens that the running decodes and a prefill chunk share (SGLang's
        mixed chunk), its KV block of V1_BLOCK_SIZE tokens and its max_num_seqs, as V1 picks
        them for the GPU (`V1_BATCH_DEFAULTS`:
        a GPU of 70 GiB or more that is not an A100 gets the larger) and its entry point
        (`offline`: the LLM class; else the API server); {} for the others."""
        if not self.token_budget:
            return {}
        large = hardware.mem_capacity >= 70 * 2**30 and "a100" not in hardware.name.lower()
        budget, seqs = V1_BATCH_DEFAULTS[(large, offline)]
        return {"enable_mixed_chunk": True, "chunked_prefill_size": budget,
                "max_prefill_tokens": budget, "max_running_requests": seqs,
                "page_size": V1_BLOCK_SIZE}

    def with_kv_free_fraction(self, fraction: float) -> EngineProfile:
        """This profile with the KV pool `fraction` of the memory the weights leave (a run's
        `kv_cache_free_gpu_mem_fraction`)."""
        return dataclasses.replace(self, kv_free_fraction=fraction)

    def with_memory_fraction(self, fraction: float) -> EngineProfile:
        """This profile with weights and KV pool `fraction` of the GPU (a run's
        --gpu-memory-utilization or --mem-fraction-static)."""
        return dataclasses.replace(self, memory_fraction=fraction)

    def with_overlap(self) -> EngineProfile:
        """This profile with the CPU of a step hidden under the device (vLLM V1's
        `--async-scheduling`)."""
        return dataclasses.replace(self, overlap=True)


ENGINE_PROFILES = MappingProxyType({
    "sglang": EngineProfile("sglang", 60e-6, 3e-6, overlap=True, swa_full_tokens_ratio=0.8),
    "vllm": EngineProfile("vllm", 0.5e-3, 14e-6, overlap=False, version="0.6 (V0 engine)",
                          memory_fraction=0.9),
    "vllm-v1": EngineProfile("vllm-v1", 60e-6, 3e-6, overlap=False, version="0.8+ (V1 engine)",
                             token_budget=True, memory_fraction=0.9),
    "trt-llm": EngineProfile("trt-llm", 60e-6, 3e-6, overlap=True, guaranteed_no_evict=True,
                             fp8_attention=True, fp4_moe_gather=True, kv_free_fraction=0.9),
    "lmdeploy": EngineProfile("lmdeploy", 60e-6, 1e-6, overlap=False),
})
DEFAULT_ENGINE_PROFILE = "sglang"
V1_FROM = (0, 8)   # vLLM's V1 engine is the default from 0.8.0 (VLLM_USE_V1=1)

# vLLM V1's batch defaults, EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py): a GPU of
# at least 70 GiB that is not an A100 gets the larger ones (PR 17885 kept A100 out). Keyed by
# (large GPU, offline LLM class): (max_num_batched_tokens, max_num_seqs).
V1_BLOCK_SIZE = 16   # vLLM's CacheConfig.block_size default on CUDA and ROCm (vllm/config/cache.py)
V1_BATCH_DEFAULTS = MappingProxyType({(True, True): (16384, 1024), (True, False): (8192, 1024),
                                      (False, True): (8192, 256), (False, False): (2048, 256)})

_PYTHON_PER_REQUEST = ("estimate: vLLM V1's Scheduler.update_from_output loop costs 0.142 ms "
                       "at batch 128 and 0.287 ms at 256, ~1.1 us per request "
                       "(vllm-project/vllm PR 46112's micro-benchmark); a Python scheduler "
                       "walks its requests ~3 times a step (schedule, prepare, process "
                       "results): 3 us")
_TRT_DSR1_BLOG = ("TensorRT-LLM tech blog 3, 'Optimizing DeepSeek R1 Throughput on NVIDIA "
                  "Blackwell GPUs' (NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog3_*.md; "
                  "the setup of the B200 max-throughput runs in the calibration set)")
SOURCES = {
    "sglang.overlap": ("SGLang's default since v0.4, the zero-overhead batch scheduler "
                       "(lmsys.org/blog/2024-12-04-sglang-v0-4; --disable-overlap-schedule "
                       "turns it off)"),
    "sglang.cpu_per_request": _PYTHON_PER_REQUEST,
    "sglang.cpu_per_step": "assumption: a fixed 60 us per pass beside the per-request loops",
    "sglang.swa_full_tokens_ratio": ("0.8, the fallback of --swa-full-tokens-ratio (sglang "
                                     "0.5.23 srt/arg_groups/fields/schedule.py); the pool's "
                                     "bytes per full-layer token are the full layers' plus "
                                     "the ratio times the sliding layers' (srt/model_executor/"
                                     "pool_configurator.py, _recompute_cell_size)"),
    "vllm.overlap": ("off: vLLM 0.6's V0 engine overlaps only output processing (the async "
                     "output processor, vllm PR 7049); scheduling and input preparation run "
                     "between steps"),
    "vllm.cpu_per_request": ("vLLM's multi-step RFC (vllm-project/vllm issue 6854): about "
                             "4 ms of GPU bubble per decode step, Llama-3-8B on one H100 "
                             "serving ShareGPT, at vLLM's default max_num_seqs of 256 running "
                             "requests: (4 ms - 0.5 ms) / 256 = 14 us"),
    "vllm.cpu_per_step": "assumption: 0.5 ms of the RFC's 4 ms bubble is per pass",
    "vllm.memory_fraction": ("0.9, EngineArgs.gpu_memory_utilization's default (vllm/engine/"
                             "arg_utils.py; CacheConfig): weights, activations and the KV cache "
                             "within 90% of the GPU (the profiled activation peak, a few GB, is "
                             "not subtracted here); a run's --gpu-memory-utilization replaces it"),
    "vllm-v1.memory_fraction": "as vllm.memory_fraction (the same flag and default in V1)",
    "vllm.scheduler_steps": ("1, vLLM's default; a run's --num-scheduler-steps sets it "
                             "(EngineProfile.with_scheduler_steps)"),
    "vllm-v1.overlap": ("off: V1 schedules step N + 1 after step N's outputs unless "
                        "--async-scheduling (vllm PR 19970, 2025-06: the scheduler one step "
                        "ahead of the model, an opt-in flag), which a run's flags turn on "
                        "(EngineProfile.with_overlap)"),
    "vllm-v1.cpu_per_request": _PYTHON_PER_REQUEST,
    "vllm-v1.cpu_per_step": ("assumption: as SGLang's; V1 keeps a persistent batch and "
                             "sends only its changes to the workers (blog.vllm.ai "
                             "2025-01-27, 'vLLM V1: A Major Upgrade to vLLM's Core "
                             "Architecture'), the design SGLang's scheduler has"),
    "vllm-v1.batch_defaults": ("V1_BATCH_DEFAULTS: vLLM's EngineArgs.get_batch_defaults "
                               "(vllm/engine/arg_utils.py)"),
    "vllm-v1.token_budget": ("V1's scheduler (vllm/v1/core/sched/scheduler.py) fills each "
                             "step's token budget with the running requests' decode tokens "
                             "first, then prefill chunks: chunked prefill is always on"),
    "trt-llm.overlap": ("TRT-LLM's overlap scheduler, on by default in the PyTorch backend "
                        "(nvidia.github.io/TensorRT-LLM, 'Overlap Scheduler'; "
                        "disable_overlap_scheduler=True turns it off). NOTE: the TensorRT-"
                        "engine runtime of 0.x releases does not overlap (its "
                        "enable_trt_overlap option was removed: tensorrtllm_backend docs, "
                        "model_config.md), but the overlap schedule stays its stand-in: "
                        "without it the trt014 hold-out set's 40 TTFTs fall 28% short "
                        "(median |error|; 7.9% with it), consistently by ~5 ms at the lightest "
                        "load, a first-token path (Triton's ensemble, in-flight batching) "
                        "not modelled (2026-12-05)"),
    "trt-llm.cpu_per_request": _PYTHON_PER_REQUEST,
    "trt-llm.cpu_per_step": "assumption: as SGLang's",
    "trt-llm.kv_free_fraction": ("0.9, KvCacheConfig.free_gpu_memory_fraction's default: 'TensorRT "
                                 "LLM will try to allocate 90% of free GPU memory for KV cache' "
                                 "(nvidia.github.io/TensorRT-LLM, 'How to Change KV Cache "
                                 "Behavior'); free memory is what the weights leave (the engine's "
                                 "activations, a few GB, are not subtracted: NOTE in "
                                 "sim.model.kv_capacity); a run's kv_cache_free_gpu_mem_fraction "
                                 "replaces it (EngineProfile.with_kv_free_fraction)"),
    "trt-llm.guaranteed_no_evict": ("TensorRT-LLM's default capacity scheduler policy, "
                                    "GUARANTEED_NO_EVICT: the LLM API's SchedulerConfig "
                                    "(tensorrt_llm/llmapi/llm_args.py) and trtllm-bench's "
                                    "--scheduler_policy (tensorrt_llm/bench/benchmark/"
                                    "throughput.py) both default to it"),
    "trt-llm.fp8_attention": (_TRT_DSR1_BLOG + ", 'FP8 KV Cache': 'In the generation phase, "
                              "both Q and KV are quantized to FP8, and FP8 Multi-Query "
                              "Attention (MQA) is used'; it reports +6% end to end at equal "
                              "concurrency (the change gives +4.8% on the calibration set's "
                              "B200 fp8-KV DeepSeek-R1 row)"),
    "trt-llm.fp4_moe_gather": (_TRT_DSR1_BLOG + ", 'FP4 AllGather Optimizations': the BF16 "
                               "AllGather before the experts replaced by an FP4 one, +4% end "
                               "to end (the change gives +3.9% on the same row)"),
    "lmdeploy.overlap": ("assumption: off; TurboMind 0.1's C++ engine loop "
                         "(src/turbomind/models/llama/LlamaBatch.cc) schedules between "
                         "forwards"),
    "lmdeploy.cpu_per_request": "assumption: C++ bookkeeping, ~1 us per request",
    "lmdeploy.cpu_per_step": "assumption: as SGLang's",
}


def get_engine_profile(profile: str | EngineProfile | None) -> EngineProfile:
    """A registered profile by name, a profile as it is, or the default (SGLang's) for None;
    ValueError naming the known profiles."""
    if isinstance(profile, EngineProfile):
        return profile
    name = DEFAULT_ENGINE_PROFILE if profile is None else profile
    if name not in ENGINE_PROFILES:
        raise ValueError(f"unknown engine profile {profile!r}; known: "
                         f"{', '.join(ENGINE_PROFILES)}")
    return ENGINE_PROFILES[name]
