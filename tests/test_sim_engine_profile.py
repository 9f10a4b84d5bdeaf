"""Engine profiles: each named engine's CPU time per step and request, vLLM's multi-step
scheduling, and the default schedule (overlap or not) a profile gives a simulation."""

from __future__ import annotations

import numpy as np
import pytest

from shared import Synthetic
from sim.cost.batch_shape import BatchShape
from sim.cost.engine_profile import ENGINE_PROFILES, SOURCES, EngineProfile, get_engine_profile
from sim.cost.kernel.model import KernelCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.build import build_simulation
from sim.run.simulate import simulate

DECODE = BatchShape.decode(np.full(64, 500), 64)


def _kernel(engine: EngineProfile) -> KernelCostModel:
    return KernelCostModel(get_model_shape("llama-3-8b"), get_hardware("h100"), 1, engine=engine)


def test_every_named_engine_is_registered():
    """The issue's engines have profiles: sglang, vllm, trt-llm (and lmdeploy)."""
    assert {"sglang", "vllm", "trt-llm", "lmdeploy"} <= set(ENGINE_PROFILES)
    assert get_engine_profile(None) == ENGINE_PROFILES["sglang"]


def test_an_unknown_profile_is_refused_naming_the_known_ones():
    """A typo names the registered profiles."""
    with pytest.raises(ValueError, match=r"unknown engine profile 'sglng'.*vllm"):
        get_engine_profile("sglng")


@pytest.mark.parametrize("field, value", [("cpu_per_step", -1.0), ("cpu_per_request", float("nan")),
                                          ("scheduler_steps", 0), ("overlap", 1),
                                          ("guaranteed_no_evict", "yes"), ("fp8_attention", 1),
                                          ("fp4_moe_gather", "no"), ("swa_full_tokens_ratio", 0.0),
                                          ("swa_full_tokens_ratio", 1.5), ("kv_free_fraction", -0.1),
                                          ("kv_free_fraction", True), ("memory_fraction", 0.0)])
def test_a_bad_profile_field_is_refused_by_name(field, value):
    """Negative or non-finite CPU seconds, fewer than one scheduler step, a non-bool overlap."""
    kwargs = {"name": "x", "cpu_per_step": 0.0, "cpu_per_request": 0.0, "overlap": False,
              field: value}
    with pytest.raises(ValueError, match=field):
        EngineProfile(**kwargs)


def test_a_step_pays_the_profile_cpu_per_step_and_per_request():
    """Overhead of a graph-replayed decode step = per-step + requests x per-request + 0 launch
    beyond the device."""
    engine = EngineProfile("x", cpu_per_step=2e-3, cpu_per_request=1e-5, overlap=False)
    cost = _kernel(engine).step_cost(DECODE)
    assert cost.overhead == pytest.approx(2e-3 + 64 * 1e-5)


def test_multi_step_scheduling_amortises_a_decode_pass_but_not_a_prefill():
    """--num-scheduler-steps 8: a decode step pays an eighth of the pass; an extend the whole."""
    one = EngineProfile("x", cpu_per_step=4e-3, cpu_per_request=1e-5, overlap=False)
    eight = one.with_scheduler_steps(8)
    assert _kernel(eight).step_cost(DECODE).overhead == pytest.approx(
        _kernel(one).step_cost(DECODE).overhead / 8)
    prefill = BatchShape.build("EXTEND", [512], [0])
    assert _kernel(eight).step_cost(prefill).overhead == pytest.approx(
        _kernel(one).step_cost(prefill).overhead)


def test_a_cpu_heavy_engine_is_slower_without_overlap_than_under_it():
    """The same CPU-heavy step: device + CPU without overlap, max(device, CPU) under it."""
    heavy = EngineProfile("x", cpu_per_step=5e-3, cpu_per_request=0.0, overlap=False)
    cost = _kernel(heavy).step_cost(DECODE)
    assert cost.time(overlap=False) == pytest.approx(cost.device + cost.overhead)
    assert cost.time(overlap=True) == pytest.approx(max(cost.device, cost.overhead))
    assert cost.time(overlap=True) < cost.time(overlap=False)


@pytest.mark.parametrize("name", sorted(ENGINE_PROFILES))
def test_a_profile_sets_the_default_schedule_and_the_cost_model_cpu(name):
    """simulate(engine_profile=...) schedules with the profile's overlap and prices its CPU."""
    s = build_simulation(engine_profile=name, cost_model="kernel")
    assert s.scheduler.config.overlap == ENGINE_PROFILES[name].overlap
    assert s.scheduler.config.guaranteed_no_evict == ENGINE_PROFILES[name].guaranteed_no_evict
    assert s.cost_model.engine == ENGINE_PROFILES[name]


@pytest.mark.parametrize("name", sorted(ENGINE_PROFILES))
def test_every_profile_number_and_schedule_names_its_source(name):
    """CPU seconds and the default schedule of each profile come with a source, and so do
    the capacity policy and the kernel choices where a profile sets them."""
    fields = ["cpu_per_step", "cpu_per_request", "overlap"]
    fields += ["batch_defaults", "token_budget"] if name == "vllm-v1" else []
    fields += [f for f in ("guaranteed_no_evict", "fp8_attention", "fp4_moe_gather",
                           "swa_full_tokens_ratio", "kv_free_fraction", "memory_fraction")
               if getattr(ENGINE_PROFILES[name], f)]
    assert all(SOURCES.get(f"{name}.{field}") for field in fields)


def test_tensorrt_llm_reserves_every_output_sglang_does_not():
    """TensorRT-LLM's profile admits under GUARANTEED_NO_EVICT; SGLang's retracts."""
    assert ENGINE_PROFILES["trt-llm"].guaranteed_no_evict
    assert not ENGINE_PROFILES["sglang"].guaranteed_no_evict


def test_an_explicit_overlap_flag_wins_over_the_profile():
    """--disable-overlap-schedule on an SGLang profile still turns overlap off."""
    s = build_simulation(engine_profile="sglang", disable_overlap_schedule=True)
    assert not s.scheduler.config.overlap


def test_an_explicit_admission_flag_wins_over_the_profile():
    """guaranteed_no_evict=False on the trt-llm profile admits as SGLang does, and True on
    SGLang's reserves every output."""
    assert not build_simulation(engine_profile="trt-llm",
                                guaranteed_no_evict=False).scheduler.config.guaranteed_no_evict
    assert build_simulation(engine_profile="sglang",
                            guaranteed_no_evict=True).scheduler.config.guaranteed_no_evict


def test_vllm_multi_step_serves_faster_than_single_step():
    """The same vLLM run with 8 scheduler steps finishes sooner: its decode CPU is amortised."""
    w = Synthetic(16, 64, 32).build(vocab_size=128256)
    single = simulate(w, cost_model="kernel", engine_profile="vllm", bounds=False, keep_trace=True)
    multi = simulate(w, cost_model="kernel", bounds=False,
                     engine_profile=get_engine_profile("vllm").with_scheduler_steps(8), keep_trace=True)
    assert multi.summary["duration"] < single.summary["duration"]
    assert multi.trace.executor["engine_profile"]["scheduler_steps"] == 8


@pytest.mark.parametrize("hardware, budget, seqs", [("h100", 8192, 1024), ("h200", 8192, 1024),
                                                    ("a100-80g", 2048, 256)])
def test_vllm_v1_schedules_its_own_token_budget_on_each_gpu(hardware, budget, seqs):
    """--engine-profile vllm-v1: V1's API-server defaults for the GPU (a budget the decodes and
    a prefill chunk share, its sequence cap, 16-token KV blocks); an explicit field wins."""
    from sim.run.deployment import Deployment

    config = Deployment(hardware=hardware, engine_profile="vllm-v1").engine_config()
    assert (config.chunked_prefill_size, config.max_prefill_tokens) == (budget, budget)
    assert config.enable_mixed_chunk and config.max_running_requests == seqs
    assert config.page_size == 16 and not config.overlap
    mine = Deployment(hardware=hardware, engine_profile="vllm-v1",
                      engine={"max_running_requests": 64}).engine_config()
    assert mine.max_running_requests == 64 and mine.chunked_prefill_size == budget
    assert Deployment(hardware=hardware, engine_profile="vllm").engine_config().page_size == 1


def test_sglang_sizes_a_sliding_window_model_pool_by_its_swa_ratio():
    """gpt-oss-20b (12 of 24 layers sliding) on one H100: SGLang's pool counts a sliding
    layer at 0.8 of a token per full-layer token, so it holds 1 / 0.9 the tokens of an
    engine whose every layer keeps every token (vLLM's profile here); a dense model holds
    the same under both."""
    def capacity(model: str, profile: str) -> int:
        return build_simulation(model=model, hardware="h100", engine_profile=profile,
                                cost_model="roofline").scheduler.config.max_total_tokens
    ratio = capacity("gpt-oss-20b", "sglang") / capacity("gpt-oss-20b", "vllm")
    assert ratio == pytest.approx(1 / 0.9, rel=1e-4)
    assert capacity("llama-3-8b", "sglang") == capacity("llama-3-8b", "vllm")


def test_tensorrt_llm_sizes_its_pool_from_the_memory_the_weights_leave():
    """TensorRT-LLM's KV pool is 0.9 of what the weights leave (free_gpu_memory_fraction),
    SGLang's what 90% of the GPU less the weights leaves: Llama-3-70B fp8 on one H200
    (about 70 GB of weights) holds 0.9 * (C - W) / (0.9 * C - W) times SGLang's tokens, and a
    run's own fraction replaces the default."""
    from sim.model.parallelism import weight_bytes_per_gpu

    def capacity(profile) -> int:
        return build_simulation(model="llama-3-70b", hardware="h200", quantization="fp8",
                                engine_profile=profile, cost_model="roofline"
                                ).scheduler.config.max_total_tokens
    shape = build_simulation(model="llama-3-70b", hardware="h200", quantization="fp8",
                             cost_model="roofline").model_shape
    c, w = get_hardware("h200").mem_capacity, weight_bytes_per_gpu(shape, 1, 1, 1)
    ratio = capacity("trt-llm") / capacity("sglang")
    assert ratio == pytest.approx(0.9 * (c - w) / (0.9 * c - w), rel=1e-4)
    assert ratio > 1.1
    roomier = ENGINE_PROFILES["trt-llm"].with_kv_free_fraction(0.95)
    assert capacity(roomier) / capacity("trt-llm") == pytest.approx(0.95 / 0.9, rel=1e-4)


def test_a_runs_memory_fraction_sizes_the_pool_from_that_share_of_the_gpu():
    """vLLM's --gpu-memory-utilization 0.85 leaves Llama-3-8B on one H100 (0.85 C - W) /
    (0.9 C - W) of the default 0.9's KV tokens; 0.9 is the simulator's default reserve."""
    from sim.model.parallelism import weight_bytes_per_gpu

    def capacity(profile) -> int:
        return build_simulation(model="llama-3-8b", hardware="h100", engine_profile=profile,
                                cost_model="roofline").scheduler.config.max_total_tokens
    c = get_hardware("h100").mem_capacity
    w = weight_bytes_per_gpu(get_model_shape("llama-3-8b"), 1, 1, 1)
    tighter = ENGINE_PROFILES["vllm-v1"].with_memory_fraction(0.85)
    assert capacity(tighter) / capacity("vllm-v1") == pytest.approx((0.85 * c - w) / (0.9 * c - w),
                                                                    rel=1e-4)
    assert capacity("vllm-v1") == capacity("sglang")
