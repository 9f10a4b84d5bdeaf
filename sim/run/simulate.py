"""`simulate(workload, ...)`: serve a workload on a simulated model and hardware.

The pieces, wired as exec's Engine wires its own: a `Scheduler` with the model's `ModelInfo`
and the KV capacity `kv_capacity_tokens` estimates (unless `max_total_tokens` is given), a
`SimModelRunner` pricing each batch with the cost model, a token source (synthetic by default)
and the SimPy driver. The trace header records the model's config.json and the executor
`{"kind": "sim", "hardware", "tp", "ep_size", "weight_dtype", "kv_dtype", "expert_zipf",
"cost_model"}`.

A run's parallelism and dtypes (keywords of `simulate`): `ep_size`
(SGLang's `--ep-size`, dividing tp and the experts), `dp_size` with `enable_dp_attention`
(SGLang's attention data parallelism: dp_size attention ranks over the tp GPUs, each
serving its share of the requests; priced by the "kernel" cost model, with the requests
taken as spread evenly over the ranks), `ep_options` (SGLang's wide-EP flags:
`sim.model.ep_options.EPOptions`), `quantization` (`--quantization`: fp8,
int4-weight-only, none; None keeps the checkpoint's `quantization_config`), `kv_cache_dtype`
(`--kv-cache-dtype`) and `expert_zipf` (hot experts: `sim.cost.expert_routing`). Bad values raise
ValueError naming the field before anything runs.

`engine_profile` (`sim.cost.engine_profile`: "sglang", "vllm", "trt-llm", "lmdeploy" or an
EngineProfile) names the engine being simulated: its CPU time per step and per request (the
"kernel" cost model's overhead; vLLM's multi-step scheduling), its default schedule (overlap
or not) and admission (TensorRT-LLM's guaranteed-no-evict or SGLang's retraction); an
explicit `disable_overlap_schedule` or `guaranteed_no_evict` wins. None: SGLang's.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from shared.config.engine_config import (
    DEFAULT_CUDA_GRAPH_MAX_BS,
    EngineConfig,
    ModelInfo,
    derive_max_running,
)
from shared.config.hf_config import eos_token_ids
from shared.loop.scheduler import Scheduler
from shared.trace.run_result import SLO, RunResult
from shared.workload.workload import Workload
from sim.cost.base import CostModel, ZeroCostModel
from sim.cost.calibrated import CalibratedCostModel
from sim.cost.engine_profile import DEFAULT_ENGINE_PROFILE, EngineProfile, get_engine_profile
from sim.cost.kernel.model import KernelCostModel
from sim.cost.kernel.params import KernelParams
from sim.cost.roofline.model import RooflineCostModel
from sim.cost.step_bounds import step_bounds
from sim.hardware.hardware import Hardware
from sim.hardware.lookup import get_hardware
from sim.hardware.precision import check_precision, run_dtypes
from sim.model.ep_options import EPOptions
from sim.model.from_config import (
    EMBEDDED_CONFIGS,
    ModelShape,
    config_dict,
    get_model_shape,
    shape_from_config,
)
from sim.model.kv_capacity import kv_capacity_tokens
from sim.model.parallelism import check_attention_dp, check_ep, check_tp
from sim.run.driver import drive_workload
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import SyntheticTokenSource, TokenSource

ModelSpec = str | os.PathLike[str] | Mapping[str, Any]
CostModelSpec = CostModel | str | os.PathLike[str] | None


class Simulation(NamedTuple):
    """Everything `simulate` runs, built by `build_simulation` (nothing has run yet)."""

    scheduler: Scheduler
    runner: SimModelRunner
    token_source: TokenSource
    cost_model: CostModel
    model_shape: ModelShape
    hardware: Hardware


def simulate(workload: Workload, *, model: ModelSpec = "llama-3-8b",
             hardware: str | os.PathLike[str] = "h100", tp: int = 1, ep_size: int = 1,
             dp_size: int = 1, enable_dp_attention: bool = False,
             ep_options: EPOptions | None = None,
             quantization: str | None = None, kv_cache_dtype: str = "auto",
             expert_zipf: float = 0.0, cost_model: CostModelSpec = None,
             kernel_params: KernelParams | None = None,
             engine_profile: str | EngineProfile | None = None,
             token_source: TokenSource | None = None, seed: int = 0, slo: SLO | None = None,
             progress: bool = False, bounds: bool = True, **engine_args: Any) -> RunResult:
    """Serve `workload` and return its RunResult.

    `model`: an embedded key (`sim.model.from_config.EMBEDDED_CONFIGS`), a config.json path or a
    config dict. `hardware`: a catalogue key or a hardware JSON path. `cost_model`: None or
    "roofline" (the roofline of model, hardware and tp), "kernel" (`sim.cost.kernel.model`),
    a CostModel, or a calibrated-model JSON path.
    `token_source`: None (SyntheticTokenSource(seed, vocab, eos)) or any TokenSource; its
    `finished` is the driver's finished hook. `kernel_params`: the constants of the "kernel"
    cost model (`sim.cost.kernel.params`). `engine_args`: EngineConfig fields. `ep_size`,
    `dp_size`, `enable_dp_attention`, `quantization`, `kv_cache_dtype`, `expert_zipf`,
    `engine_profile`: see the module doc.
    `bounds`: fill the steps' `bound` column (each recorded batch re-priced once after the
    run, `sim.cost.step_bounds`); False leaves it "" and saves that pass.
    Raises ValueError for unknown keys, bad parameters or an empty workload."""
    if not len(workload):
        raise ValueError("the workload has no requests")
    s = build_simulation(model=model, hardware=hardware, tp=tp, ep_size=ep_size,
                         dp_size=dp_size, enable_dp_attention=enable_dp_attention,
                         ep_options=ep_options, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                         expert_zipf=expert_zipf, cost_model=cost_model,
                         kernel_params=kernel_params, engine_profile=engine_profile,
                         token_source=token_source, seed=seed, **engine_args)
    trace = drive_workload(s.scheduler, s.runner, workload,
                           finished_hook=s.token_source.finished, progress=progress)
    steps = step_bounds(s.cost_model, trace, s.runner.overlap) if bounds else None
    return RunResult.from_trace(trace, slo, steps)


def build_simulation(*, model: ModelSpec = "llama-3-8b",
                     hardware: str | os.PathLike[str] = "h100", tp: int = 1, ep_size: int = 1,
                     dp_size: int = 1, enable_dp_attention: bool = False,
                     ep_options: EPOptions | None = None,
                     quantization: str | None = None, kv_cache_dtype: str = "auto",
                     expert_zipf: float = 0.0, cost_model: CostModelSpec = None,
                     kernel_params: KernelParams | None = None,
                     engine_profile: str | EngineProfile | None = None,
                     token_source: TokenSource | None = None, seed: int = 0,
                     **engine_args: Any) -> Simulation:
    """The scheduler, runner, token source and cost model `simulate` uses (same arguments)."""
    config_json, shape = load_model(model)
    hw = get_hardware(hardware)
    shape = shape.with_dtypes(*run_dtypes(shape.weight_dtype, quantization, kv_cache_dtype))
    check_precision(hw, shape.weight_dtype, quantization)
    ep_options = ep_options or EPOptions()
    shape = ep_options.physical_shape(shape)
    attention_dp = attention_dp_ranks(dp_size, enable_dp_attention, tp, shape)
    check_tp(tp // attention_dp, shape)   # the attention heads split over the attention tp
    check_ep(ep_size, tp, shape)
    ep_options.check(attention_dp, tp)
    profile = get_engine_profile(engine_profile)
    engine = engine_config({"disable_overlap_schedule": not profile.overlap,
                            "guaranteed_no_evict": profile.guaranteed_no_evict, **engine_args})
    info = model_info(config_json, shape)
    cost = resolve_cost_model(cost_model, shape, hw, tp, ep_size, expert_zipf,
                              graph_batch_limit(engine), kernel_params, attention_dp, ep_options,
                              profile)
    capacity = kv_capacity_tokens(shape, hw, tp, engine.max_total_tokens, ep_size=ep_size,
                                  attention_dp=attention_dp,
                                  extra_weight_bytes=ep_options.replicated_weight_bytes(shape, tp))
    if attention_dp > 1:
        engine = dp_attention_running_cap(engine, capacity, info.context_length, attention_dp)
    scheduler = Scheduler(engine, info, kv_capacity=capacity)
    scheduler.trace.model_config = config_json
    scheduler.trace.executor = {"kind": "sim", "hardware": hw.key, "tp": tp,
                                **run_extras(shape, ep_size, expert_zipf, attention_dp),
                                "cost_model": describe_cost_model(cost)}
    if not ep_options.is_default:
        scheduler.trace.executor["ep_options"] = dataclasses.asdict(ep_options)
    if profile != get_engine_profile(DEFAULT_ENGINE_PROFILE):
        scheduler.trace.executor["engine_profile"] = dataclasses.asdict(profile)
    source = token_source or SyntheticTokenSource(seed, info.vocab_size, info.eos_token_ids)
    runner = SimModelRunner(cost, source, scheduler.config, info)
    return Simulation(scheduler, runner, source, cost, shape, hw)


def load_model(model: ModelSpec) -> tuple[dict[str, Any], ModelShape]:
    """(config.json as a JSON-ready dict, ModelShape) for a key, path or config dict.
    Unknown keys raise ValueError listing the known ones."""
    shape = get_model_shape(model)
    if isinstance(model, Mapping):
        config = dict(model)
    elif os.fspath(model) in EMBEDDED_CONFIGS:
        config = config_dict(os.fspath(model))
    else:
        path = Path(model)
        config = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    config = json.loads(json.dumps(config))  # tuples -> lists, as a saved trace reads back
    return config, shape_from_config(config, shape.name)


def attention_dp_ranks(dp_size: int, enable_dp_attention: bool, tp: int,
                       shape: ModelShape) -> int:
    """The attention data-parallel ranks of a run (1 without attention DP). ValueError for
    dp_size > 1 without enable_dp_attention (independent replicas, which one simulated engine
    does not model) or a dp_size that does not split tp into valid attention ranks."""
    if not isinstance(enable_dp_attention, bool):
        raise ValueError(f"enable_dp_attention must be a bool, got {enable_dp_attention!r}")
    if not enable_dp_attention:
        if dp_size != 1:
            raise ValueError(f"dp_size={dp_size!r} without enable_dp_attention is "
                             f"{dp_size} independent replicas behind a router: run them with "
                             f"sim.simulate_fleet(workload, replicas={dp_size}) (batchtwin "
                             f"simulate --dp {dp_size}), or pass enable_dp_attention=True for "
                             f"SGLang's attention data parallelism")
        return 1
    check_attention_dp(dp_size, tp, shape)
    return dp_size


def dp_attention_running_cap(engine: EngineConfig, capacity: int, model_context: int,
                             attention_dp: int) -> EngineConfig:
    """The engine with SGLang's running-request cap of `attention_dp` ranks: each rank's
    scheduler derives its own (semantics §3.1, from its 1 / attention_dp of the KV), and
    a --max-running-requests value is split over the ranks, so one scheduler standing
    for all of them holds attention_dp times a rank's cap."""
    context = engine.context_length or model_context
    per_rank = engine.max_running_requests // attention_dp if engine.max_running_requests \
        else None
    cap = derive_max_running(per_rank, capacity // attention_dp, context)
    return dataclasses.replace(engine, max_running_requests=max(1, cap) * attention_dp)


def run_extras(shape: ModelShape, ep_size: int, expert_zipf: float,
               attention_dp: int = 1) -> dict[str, Any]:
    """The executor header's parallelism and dtype fields that differ from the defaults
    (ep_size 1, no attention DP, bf16 weights and KV, uniform routing), so a dense default
    run's header is unchanged."""
    extras = {"ep_size": ep_size, "attention_dp": attention_dp, "weight_dtype": shape.weight_dtype,
              "kv_dtype": shape.kv_dtype, "expert_zipf": expert_zipf}
    defaults = {"ep_size": 1, "attention_dp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16",
                "expert_zipf": 0.0}
    return {k: v for k, v in extras.items() if v != defaults[k]}


def model_info(config: Mapping[str, Any], shape: ModelShape) -> ModelInfo:
    """Vocabulary and context length from the shape, EOS ids from config.json's
    `eos_token_id` (an int or a list; none when absent: `shared.config.hf_config`)."""
    return ModelInfo(shape.vocab_size, eos_token_ids(dict(config)), shape.max_position_embeddings)


def engine_config(engine_args: Mapping[str, Any]) -> EngineConfig:
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    unknown = sorted(set(engine_args) - names)
    if unknown:
        raise TypeError(f"unknown engine argument(s) {unknown}; EngineConfig fields are "
                        f"{sorted(names)}")
    return EngineConfig(**engine_args)


def resolve_cost_model(cost_model: CostModelSpec, shape: ModelShape, hardware: Hardware,
                       tp: int, ep_size: int = 1, expert_zipf: float = 0.0,
                       cuda_graph_max_bs: int | None = None,
                       kernel_params: KernelParams | None = None,
                       attention_dp: int = 1, ep_options: EPOptions | None = None,
                       engine_profile: EngineProfile | None = None) -> CostModel:
    """None or "roofline": the roofline; "kernel": the kernel-level model
    (`sim.cost.kernel.model`, with `kernel_params` or the defaults, and the CPU time of
    `engine_profile`, SGLang's when None); a CostModel as it is;
    a path: a calibrated model's JSON. Attention DP (`attention_dp` > 1) is priced by the
    kernel model only: ValueError for the others."""
    if cost_model == "kernel":
        graphs = {} if cuda_graph_max_bs is None else {"cuda_graph_max_bs": cuda_graph_max_bs}
        return KernelCostModel(shape, hardware, tp, ep_size, expert_zipf,
                               kernel_params or KernelParams(), attention_dp=attention_dp,
                               ep_options=ep_options or EPOptions(),
                               engine=get_engine_profile(engine_profile), **graphs)
    if isinstance(cost_model, CostModel):
        return cost_model
    if attention_dp > 1:
        raise ValueError(f"attention data parallelism (dp_size={attention_dp}) is priced by "
                         f"the kernel cost model only; pass cost_model='kernel' "
                         f"(--cost-model kernel)")
    if cost_model is None or cost_model == "roofline":
        return RooflineCostModel(shape, hardware, tp, ep_size=ep_size, expert_zipf=expert_zipf)
    if isinstance(cost_model, (str, os.PathLike)):
        if not Path(cost_model).is_file():
            raise ValueError(f"cost model file {os.fspath(cost_model)!r} does not exist "
                             f"(name a calibrated-model JSON, 'roofline' or 'kernel')")
        return CalibratedCostModel.load(cost_model)
    raise ValueError(f"cost_model must be None, 'roofline', 'kernel', a CostModel or a "
                     f"calibrated JSON path, got {type(cost_model).__name__}")


def graph_batch_limit(engine: EngineConfig) -> int:
    """The largest decode batch the engine replays as a CUDA graph (0: graphs disabled)."""
    if engine.disable_cuda_graph:
        return 0
    return engine.cuda_graph_max_bs or DEFAULT_CUDA_GRAPH_MAX_BS


def describe_cost_model(cost: CostModel) -> str:
    """A one-line description for the trace header."""
    if isinstance(cost, RooflineCostModel):
        m, ep = cost.model_shape, f", ep={cost.ep_size}" if cost.ep_size > 1 else ""
        dtype = "" if m.weight_dtype == "bf16" else f", {m.weight_dtype}"
        return f"roofline({m.name}, {cost.hardware.key}, tp={cost.tp}{ep}{dtype})"
    if isinstance(cost, KernelCostModel):
        m, ep = cost.model_shape, f", ep={cost.ep_size}" if cost.ep_size > 1 else ""
        dtype = "" if m.weight_dtype == "bf16" else f", {m.weight_dtype}"
        dp = f", dp_attention={cost.attention_dp}" if cost.attention_dp > 1 else ""
        return f"kernel({m.name}, {cost.hardware.key}, tp={cost.tp}{ep}{dp}{dtype})"
    if isinstance(cost, CalibratedCostModel):
        return f"calibrated({cost.source or 'unknown source'})"
    if isinstance(cost, ZeroCostModel):
        return "zero"
    return type(cost).__name__
