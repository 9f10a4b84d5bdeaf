"""Flag groups several commands share (`simulate`, `plan`, `serve`): parallelism, engine
profile and EngineConfig flags, and the readers that turn them back into keywords."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from experiments.cli.arg_types import non_negative_float, non_negative_int, positive_int
from experiments.cli.errors import UsageError


def parallelism_arguments(g: argparse._ArgumentGroup) -> None:
    """--ep-size, --dp-size, --enable-dp-attention, --quantization, --kv-cache-dtype
    (SGLang's names) and --expert-zipf."""
    from sim.hardware.precision import KV_CACHE_DTYPES, QUANTIZATIONS
    from sim.model.ep_options import A2A_BACKENDS

    g.add_argument("--ep-size", type=positive_int, default=1,
                   help="expert-parallel degree (MoE models; divides --tp and the experts)")
    g.add_argument("--dp-size", "--dp", type=positive_int, default=1,
                   help="with --enable-dp-attention: attention ranks over the --tp GPUs; "
                        "without it: engine replicas, each on its own --tp GPUs, behind "
                        "--router (simulate)")
    g.add_argument("--enable-dp-attention", action="store_true",
                   help="SGLang's attention data parallelism: --dp-size attention ranks over "
                        "the --tp GPUs, MLP and experts over all of them (needs --cost-model "
                        "kernel)")
    g.add_argument("--moe-a2a-backend", choices=A2A_BACKENDS, default="none",
                   help="deepep: dispatch each token to its experts' GPUs (with attention DP)")
    g.add_argument("--moe-dense-tp-size", type=positive_int, choices=(1,), default=None,
                   help="1: dense MLPs and shared experts data-parallel (with attention DP)")
    g.add_argument("--enable-dp-lm-head", action="store_true",
                   help="each attention rank computes its own rows' logits")
    g.add_argument("--enable-two-batch-overlap", action="store_true",
                   help="hide the expert all-to-all under the other micro-batch's compute")
    g.add_argument("--ep-num-redundant-experts", type=non_negative_int, default=0,
                   help="EPLB's extra expert copies (E + R must divide by --ep-size)")
    g.add_argument("--quantization", choices=tuple(QUANTIZATIONS), default=None,
                   help="weight format (default: the checkpoint's quantization_config, else "
                        "bf16); fp8 needs hardware with an fp8 peak, nvfp4 (modelopt_fp4) "
                        "one with an fp4 peak (b200)")
    g.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto",
                   help="KV cache dtype (auto: bf16)")
    g.add_argument("--expert-zipf", type=non_negative_float, default=0.0, metavar="S",
                   help="Zipf exponent of expert popularity, for hot experts (0: uniform)")


def engine_profile_arguments(g: argparse._ArgumentGroup) -> None:
    """--engine-profile and vLLM's --num-scheduler-steps."""
    from sim.cost.engine_profile import ENGINE_PROFILES

    g.add_argument("--engine-profile", choices=tuple(ENGINE_PROFILES), default=None,
                   help="the engine simulated: its CPU time per step and request (kernel cost "
                        "model), its default schedule (sglang, trt-llm: overlap; vllm (V0), "
                        "vllm-v1, lmdeploy: none; vllm-v1: one token budget per step shared "
                        "by decodes and a prefill chunk, V1's defaults for the GPU) and "
                        "admission (trt-llm: guaranteed no evict); default sglang")
    g.add_argument("--num-scheduler-steps", type=positive_int, default=1,
                   help="vLLM's multi-step scheduling: decode steps per scheduling pass "
                        "(with --engine-profile vllm)")


def engine_profile_arg(args: argparse.Namespace):
    """The `engine_profile` keyword of engine_profile_arguments' flags (None: the default);
    UsageError for --num-scheduler-steps on an engine without multi-step scheduling."""
    from sim.cost.engine_profile import get_engine_profile

    if args.num_scheduler_steps == 1:
        return args.engine_profile
    if args.engine_profile != "vllm":
        raise UsageError(f"--num-scheduler-steps {args.num_scheduler_steps} is vLLM's "
                         f"multi-step scheduling; add --engine-profile vllm")
    return get_engine_profile("vllm").with_scheduler_steps(args.num_scheduler_steps)


def deployment(args: argparse.Namespace):
    """The simulated engine instance the flags describe (`sim.run.deployment.Deployment`):
    --model, --hardware, --tp, the parallelism and dtype flags, --cost-model, the engine
    profile and the EngineConfig flags."""
    from sim.run.deployment import Deployment

    return Deployment(model=args.model, hardware=args.hardware, tp=args.tp,
                      **parallelism_args(args), cost_model=args.cost_model,
                      engine_profile=engine_profile_arg(args), engine=engine_args(args))


def parallelism_args(args: argparse.Namespace) -> dict[str, Any]:
    """The Deployment fields of parallelism_arguments' flags."""
    from sim.model.ep_options import EPOptions

    options = EPOptions(args.moe_a2a_backend, args.moe_dense_tp_size, args.enable_dp_lm_head,
                        args.enable_two_batch_overlap, args.ep_num_redundant_experts)
    return {"ep_size": args.ep_size, "dp_size": args.dp_size,
            "enable_dp_attention": args.enable_dp_attention, "ep_options": options,
            "quantization": args.quantization,
            "kv_cache_dtype": args.kv_cache_dtype, "expert_zipf": args.expert_zipf}


def engine_arguments(g: argparse._ArgumentGroup) -> None:
    """One flag per EngineConfig field (their annotations are strings: 'int | None', ...)."""
    from shared.config.engine_config import EngineConfig

    for f in dataclasses.fields(EngineConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = str(f.type)
        if kind == "bool":
            g.add_argument(flag, action="store_true", default=None)
        else:
            convert = int if "int" in kind else float if "float" in kind else str
            g.add_argument(flag, type=convert, default=None, help=f"default: {f.default}")


def engine_args(args: argparse.Namespace) -> dict[str, Any]:
    """The EngineConfig fields given on the command line."""
    from shared.config.engine_config import EngineConfig

    names = (f.name for f in dataclasses.fields(EngineConfig))
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def cost_model_names() -> str:
    """"roofline, kernel (default)": the registered cost models, for a --cost-model help."""
    from sim.cost.registry import COST_MODELS, DEFAULT_COST_MODEL

    return ", ".join(f"{n} (default)" if n == DEFAULT_COST_MODEL else n for n in COST_MODELS)
