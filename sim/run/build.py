"""`build_simulation(deployment)`: the pieces one simulated engine runs, wired as exec's Engine
wires its own: a `Scheduler` with the model's `ModelInfo` and the KV capacity
`kv_capacity_tokens` estimates (unless `max_total_tokens` is given), a `SimModelRunner`
pricing each batch with the deployment's cost model, and a token source (synthetic by
default). The trace header (given to the Scheduler when it is built) records the model's
config.json and the executor `{"kind": "sim", "hardware", "tp", "ep_size", "weight_dtype",
"kv_dtype", "expert_zipf", "cost_model"}` (fields at their defaults left out), the EP
options and engine profile when not the defaults, and `header_extra` (a fleet's replica).
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
from shared.trace.run_log import FULL_TRACE, Keep
from shared.trace.trace import TraceHeader
from sim.cost.base import CostModel
from sim.cost.engine_profile import DEFAULT_ENGINE_PROFILE, get_engine_profile
from sim.cost.registry import CostInputs, build_cost_model
from sim.cost.step_bounds import chunk_bounds
from sim.hardware.hardware import Hardware
from sim.hardware.lookup import get_hardware
from sim.hardware.precision import check_precision, run_dtypes
from sim.model.from_config import (
    EMBEDDED_CONFIGS,
    ModelShape,
    config_dict,
    get_model_shape,
    shape_from_config,
)
from sim.model.kv_capacity import kv_capacity_tokens
from sim.model.parallelism import check_attention_dp, check_ep, check_tp
from sim.run.deployment import Deployment, ModelSpec
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import SyntheticTokenSource, TokenSource


class Simulation(NamedTuple):
    """Everything a run of one engine needs, built by `build_simulation` (nothing has run)."""

    scheduler: Scheduler
    runner: SimModelRunner
    token_source: TokenSource
    cost_model: CostModel
    model_shape: ModelShape
    hardware: Hardware


def build_simulation(deployment: Deployment | None = None, *, seed: int = 0,
                     token_source: TokenSource | None = None,
                     header_extra: Mapping[str, Any] | None = None, keep: Keep = FULL_TRACE,
                     bounds: bool = True, **keywords: Any) -> Simulation:
    """The scheduler, runner, token source and cost model of `deployment` (or of the flat
    keywords `Deployment.from_keywords` takes). `token_source`: None (SyntheticTokenSource(
    seed, vocab, eos)) or any TokenSource. `keep`: what the scheduler records (a Trace by
    default); a RunLog's steps get their bound priced by the cost model when `bounds`.
    Raises ValueError (TypeError for an unknown engine
    field) before anything runs."""
    d = _deployment(deployment, keywords)
    config_json, shape = load_model(d.model)
    hw = get_hardware(d.hardware)
    shape = shape.with_dtypes(*run_dtypes(shape.weight_dtype, d.quantization, d.kv_cache_dtype))
    check_precision(hw, shape.weight_dtype, d.quantization)
    ep_options = d.resolved_ep_options()
    shape = ep_options.physical_shape(shape)
    attention_dp = attention_dp_ranks(d.dp_size, d.enable_dp_attention, d.tp, shape)
    check_tp(d.tp // attention_dp, shape)   # the attention heads split over the attention tp
    check_ep(d.ep_size, d.tp, shape)
    ep_options.check(attention_dp, d.tp)
    profile = get_engine_profile(d.engine_profile)
    engine = d.engine_config()
    info = model_info(config_json, shape)
    cost = build_cost_model(d.cost_model, CostInputs(
        shape, hw, d.tp, d.ep_size, d.expert_zipf, graph_batch_limit(engine), d.kernel_params,
        attention_dp, ep_options, profile))
    capacity = kv_capacity_tokens(shape, hw, d.tp, engine.max_total_tokens, ep_size=d.ep_size,
                                  attention_dp=attention_dp,
                                  extra_weight_bytes=ep_options.replicated_weight_bytes(shape, d.tp),
                                  swa_full_tokens_ratio=profile.swa_full_tokens_ratio,
                                  kv_free_fraction=profile.kv_free_fraction,
                                  memory_fraction=profile.memory_fraction)
    if attention_dp > 1:
        engine = dp_attention_running_cap(engine, capacity, info.context_length, attention_dp)
    executor = {"kind": "sim", "hardware": hw.key, "tp": d.tp,
                **run_extras(shape, d.ep_size, d.expert_zipf, attention_dp),
                "cost_model": cost.describe()}
    if not ep_options.is_default:
        executor["ep_options"] = dataclasses.asdict(ep_options)
    if profile != get_engine_profile(DEFAULT_ENGINE_PROFILE):
        executor["engine_profile"] = dataclasses.asdict(profile)
    header = TraceHeader(config_json, {**executor, **(header_extra or {})})
    if bounds and not keep.trace:
        keep = dataclasses.replace(keep, step_bounds=chunk_bounds(cost, engine.overlap))
    scheduler = Scheduler(engine, info, kv_capacity=capacity, header=header, keep=keep)
    source = token_source or SyntheticTokenSource(seed, info.vocab_size, info.eos_token_ids)
    runner = SimModelRunner(cost, source, scheduler.config, info)
    return Simulation(scheduler, runner, source, cost, shape, hw)


def _deployment(deployment: Deployment | None, keywords: dict[str, Any]) -> Deployment:
    if deployment is None:
        return Deployment.from_keywords(**keywords)
    if keywords:
        raise TypeError(f"give a Deployment or its keywords, not both (got {sorted(keywords)})")
    return deployment


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
                             f"sim.simulate(workload, deployment, sim.Fleet({dp_size})) (batchtwin "
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


def graph_batch_limit(engine: EngineConfig) -> int:
    """The largest decode batch the engine replays as a CUDA graph (0: graphs disabled)."""
    if engine.disable_cuda_graph:
        return 0
    return engine.cuda_graph_max_bs or DEFAULT_CUDA_GRAPH_MAX_BS
