"""`engine_args(row, notes, sim_args, workload)`: the serving engine of a calibration-set row
as simulator keywords: its engine profile (`sim.cost.engine_profile`, from the `engine` column,
with vLLM's multi-step scheduling from the published flags), the batch limits the
published commands set (vLLM's `--max-num-seqs` and `--max-num-batched-tokens`, TRT-LLM's
`max_num_tokens`, or, where a trtllm-bench run prints none, the tool's own heuristic) and
SGLang's `--disable-cuda-graph` / `--disable-overlap-schedule`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# substring of the `engine` column (lower case) -> engine profile
ENGINES = (("tensorrt-llm", "trt-llm"), ("sglang", "sglang"), ("lmdeploy", "lmdeploy"),
           ("vllm", "vllm"))
SCHEDULER_STEPS = re.compile(r"(?:num[-_]scheduler[-_]steps?|multi-step scheduling)[ =]*(\d+)")
# NOTE: the flag as a command line writes it or as a YAML/kwargs config does (max_num_seqs: 1792)
MAX_NUM_SEQS = re.compile(r"max[-_]num[-_]seqs[ =:]+(\d+)")
MAX_BATCHED_TOKENS = re.compile(r"max[-_]num[-_]batched[-_]tokens[ =:]+(\d+)")
ASYNC_SCHEDULING = re.compile(r"async[-_]scheduling(?![ =:]+(?:false|0)\b)", re.I)
MAX_NUM_TOKENS = re.compile(r"max_num_tokens[ =:]*(\d+)")
MEMORY_FRACTION = re.compile(r"(?:gpu[-_]memory[-_]utilization|mem[-_]fraction[-_]static)"
                             r"[ =:]*(0?\.\d+|1\.0*)")
KV_FREE_FRACTION = re.compile(r"(?:kv_cache_free_gpu_mem(?:ory)?_fraction|free_gpu_memory_fraction)"
                              r"[ =:]*(0?\.\d+|1\.0*)")
VERSION = re.compile(r"(?<![\d.])v?(\d+)\.(\d+)")
YEAR_2025_ON = re.compile(r"\b20(2[5-9]|[3-9]\d)\b")
# vLLM's offline entry points (UsageContext.LLM_CLASS): the LLM class, `vllm bench throughput`
OFFLINE_ENTRY = re.compile(r"bench throughput|benchmark_throughput|LLM\(|offline", re.I)


def engine_args(row: Mapping[str, Any], notes: list[str], sim_args: Mapping[str, Any],
                workload: Any) -> dict[str, Any]:
    """{"engine_profile": ...} and the batch limits of the engine's flags (for `trtllm-bench`
    runs that print none, the tool's own heuristic for the run's `sim_args` and `workload`);
    {} for an engine without a profile (the simulator's default, SGLang's, is then used and
    noted)."""
    name = profile_name(str(row.get("engine", "")))
    if name is None:
        notes.append(f"engine {row.get('engine')!r} has no profile: SGLang's")
        return {}
    if name == "trt-llm":
        return {"engine_profile": _trt_profile(row, notes),
                **_trt_limits(row, notes, sim_args, workload)}
    if name == "sglang":
        return {"engine_profile": _memory(name, row, notes), **_sglang_flags(row, notes)}
    if name != "vllm":
        return {"engine_profile": name}
    if is_vllm_v1(row):
        args = _vllm_v1(row, notes, sim_args)
        return {**args, "engine_profile": _memory(args["engine_profile"], row, notes)}
    return {"engine_profile": _memory(_vllm_profile(row, notes), row, notes),
            **_vllm_limits(row, notes)}


def _memory(profile, row: Mapping[str, Any], notes: list[str]):
    """`profile` with the share of GPU memory for weights and KV that the row's
    --gpu-memory-utilization (vLLM) or --mem-fraction-static (SGLang) sets, as it is when
    the row sets none."""
    from sim.cost.engine_profile import get_engine_profile

    match = MEMORY_FRACTION.search(str(row.get("workload", "")))
    if match is None:
        return profile
    notes.append(f"weights and KV within {match.group(1)} of the GPU (the run's flag)")
    return get_engine_profile(profile).with_memory_fraction(float(match.group(1)))


def is_vllm_v1(row: Mapping[str, Any]) -> bool:
    """Whether a vLLM row ran the V1 engine: its version 0.8 or later (`V1_FROM`), or, with
    no version, a source or caveat dated 2025 or later."""
    from sim.cost.engine_profile import V1_FROM

    version = VERSION.search(str(row.get("engine_version", "")))
    if version is not None:
        return (int(version.group(1)), int(version.group(2))) >= V1_FROM
    return YEAR_2025_ON.search(f"{row.get('engine_version', '')} {row.get('source', '')} "
                               f"{row.get('caveat', '')}") is not None


def _vllm_v1(row: Mapping[str, Any], notes: list[str], sim_args: Mapping[str, Any]
             ) -> dict[str, Any]:
    """V1's schedule: every step one token budget (--max-num-batched-tokens, else V1's
    default for the GPU and the entry point) that the running decodes and a prefill chunk
    share (SGLang's mixed chunk), at most --max-num-seqs running (else V1's default), the
    scheduler one step ahead under --async-scheduling."""
    from sim.cost.engine_profile import V1_BATCH_DEFAULTS, get_engine_profile

    text = str(row.get("workload", ""))
    large, offline = sim_args.get("hardware") != "a100-80g", bool(OFFLINE_ENTRY.search(text))
    budget, seqs = V1_BATCH_DEFAULTS[(large, offline)]
    given_tokens, given_seqs = MAX_BATCHED_TOKENS.search(text), MAX_NUM_SEQS.search(text)
    budget = int(given_tokens.group(1)) if given_tokens else budget
    seqs = int(given_seqs.group(1)) if given_seqs else seqs
    profile = get_engine_profile("vllm-v1")
    if ASYNC_SCHEDULING.search(text):
        profile = profile.with_overlap()
    notes.append(f"vLLM V1: a {budget}-token budget per step shared by decodes and a prefill "
                 f"chunk, up to {seqs} running{', async scheduling' if profile.overlap else ''}")
    return {"engine_profile": profile, "chunked_prefill_size": budget,
            "max_prefill_tokens": budget, "enable_mixed_chunk": True,
            "max_running_requests": seqs}


def profile_name(engine: str) -> str | None:
    """The engine profile of an `engine` cell, None when no rule matches."""
    low = engine.lower()
    return next((profile for part, profile in ENGINES if part in low), None)


def _vllm_profile(row: Mapping[str, Any], notes: list[str]):
    from sim.cost.engine_profile import get_engine_profile

    text = f"{row.get('workload', '')} {row.get('caveat', '')}"
    match = SCHEDULER_STEPS.search(text)
    if match is None:
        return "vllm"
    notes.append(f"vLLM multi-step scheduling: {match.group(1)} decode steps per pass")
    return get_engine_profile("vllm").with_scheduler_steps(int(match.group(1)))


def _vllm_limits(row: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """--max-num-seqs as the running-request cap; --max-num-batched-tokens as vLLM's chunked
    prefill: one token budget per step for the running decodes and a prefill chunk (SGLang's
    enable_mixed_chunk, whose chunk budget the decodes share in the same way)."""
    text, limits = str(row.get("workload", "")), {}
    seqs, tokens = MAX_NUM_SEQS.search(text), MAX_BATCHED_TOKENS.search(text)
    if seqs:
        limits["max_running_requests"] = int(seqs.group(1))
    if "--enable-chunked-prefill=False" in text:
        notes.append("--enable-chunked-prefill=False: prefills unchunked")
        limits["chunked_prefill_size"] = None
    if tokens:
        budget = int(tokens.group(1))
        notes.append(f"--max-num-batched-tokens {budget}: chunked prefill, each step's "
                     f"{budget}-token budget shared by its decodes and a prefill chunk")
        limits.update(chunked_prefill_size=budget, max_prefill_tokens=budget,
                      enable_mixed_chunk=True)
    return limits


def _sglang_flags(row: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """The SGLang server flags a row's command names that change the schedule or the
    launches: --disable-cuda-graph, --disable-overlap-schedule."""
    text, flags = str(row.get("workload", "")), {}
    for flag, field in (("--disable-cuda-graph", "disable_cuda_graph"),
                        ("--disable-overlap-schedule", "disable_overlap_schedule")):
        if flag in text:
            notes.append(f"{flag}: {field}")
            flags[field] = True
    return flags


def _trt_profile(row: Mapping[str, Any], notes: list[str]):
    """TensorRT-LLM's profile, its KV pool the run's kv_cache_free_gpu_mem_fraction of the
    memory the weights leave when the row names one."""
    from sim.cost.engine_profile import get_engine_profile

    match = KV_FREE_FRACTION.search(str(row.get("workload", "")))
    if match is None:
        return "trt-llm"
    notes.append(f"kv_cache_free_gpu_mem_fraction {match.group(1)}: the KV pool's share of "
                 f"the memory the weights leave")
    return get_engine_profile("trt-llm").with_kv_free_fraction(float(match.group(1)))


def _trt_limits(row: Mapping[str, Any], notes: list[str], sim_args: Mapping[str, Any],
                workload: Any) -> dict[str, Any]:
    """TRT-LLM's max_num_tokens (the tokens one rank's forward takes) as the prefill chunk;
    where a trtllm-bench run prints no limits, the tool's heuristic gives max_num_tokens and
    max_batch_size (per rank: the running cap is dp times it).
    NOTE: under attention DP each rank schedules its own context chunks, so a step holds one
    rank's budget of new tokens, not one per rank: the budget is not multiplied by dp."""
    text = str(row.get("workload", ""))
    match = MAX_NUM_TOKENS.search(text)
    if match is None:
        if "trtllm-bench" not in text or workload.sharegpt or not workload.output_len \
                or "max_batch_size" in text:
            return {}
        return _heuristic_limits(notes, sim_args, workload)
    budget = int(match.group(1))
    notes.append(f"max_num_tokens {budget}: a {budget}-token prefill chunk per step (one "
                 f"rank's budget; the attention-DP ranks schedule their contexts apart)")
    return {"chunked_prefill_size": budget, "max_prefill_tokens": budget}


def _heuristic_limits(notes: list[str], sim_args: Mapping[str, Any], workload: Any
                      ) -> dict[str, Any]:
    from experiments.published_check.trtllm_bench_limits import trtllm_bench_limits
    from sim.hardware.lookup import get_hardware
    from sim.hardware.precision import run_dtypes
    from sim.model.from_config import get_model_shape

    shape = get_model_shape(sim_args["model"])
    shape = shape.with_dtypes(*run_dtypes(shape.weight_dtype, sim_args["quantization"],
                                          sim_args["kv_cache_dtype"]))
    limits = trtllm_bench_limits(shape, get_hardware(sim_args["hardware"]), sim_args["tp"],
                                 workload.input_len, workload.output_len)
    dp = sim_args.get("dp_size", 1)
    notes.append(f"limits not printed: trtllm-bench's heuristic (tuning.py) gives "
                 f"max_batch_size {limits.max_batch_size} per rank and max_num_tokens "
                 f"{limits.max_num_tokens}")
    return {"max_running_requests": limits.max_batch_size * dp,
            "chunked_prefill_size": limits.max_num_tokens,
            "max_prefill_tokens": limits.max_num_tokens}
