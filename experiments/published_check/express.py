"""`express(row)`: a calibration-set row (`../shared/reference/published-calibration-set.csv`,
columns as its `.md` explains) as a `RowSpec` the simulator runs, or `Unexpressed` naming
what the simulator cannot model yet. Each guess a row forces is written in its
`assumptions`, so the report says what was assumed where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from experiments.published_check.engine_flags import VERSION, engine_args, is_vllm_v1, profile_name
from experiments.published_check.mlperf import submitter_layout
from experiments.published_check.names import HARDWARE, METRICS, MODELS
from experiments.published_check.requests import PREFILL_TOKENS_PER_DEVICE, Refused, workload_of
from experiments.published_check.row_spec import RowSpec, Unexpressed, WorkloadSpec
from experiments.published_check.sources import source_name

GPUS_PER_NODE = 8
# NOTE: the LMSYS large-EP runs: EPLB's redundant experts (SGLang issue 6017's launch
# commands: --ep-num-redundant-experts 32).
REDUNDANT_EXPERTS = 32
# NOTE: a general rule, not a per-row fit: ModelOpt's PTQ export quantizes the KV cache to
# fp8 unless told otherwise (NVIDIA/TensorRT-Model-Optimizer examples/llm_ptq/hf_ptq.py,
# `--kv_cache_qformat` default "fp8"), writing `kv_cache_quant_algo: FP8` into the
# checkpoint's hf_quant_config.json, and TRT-LLM's KV dtype "auto" follows the checkpoint.
MODELOPT_KV = ("ModelOpt checkpoint, KV dtype not stated: fp8 KV (ModelOpt's export default, "
               "which TRT-LLM's 'auto' KV dtype follows)")


def express(row: Mapping[str, Any]) -> RowSpec | Unexpressed:
    """The row as a run, or the first reason it cannot be one."""
    try:
        return _express(row)
    except Refused as e:
        return Unexpressed(str(row["id"]), source_name(str(row["source"])), str(e))


def _express(row: Mapping[str, Any]) -> RowSpec:
    notes: list[str] = []
    model = _model(str(row["model"]))
    layout = submitter_layout(source_name(str(row["source"])), model,
                              str(row["request_rate_or_concurrency"]))
    parallel = _parallelism(row, notes, layout)
    engines = parallel.pop("engines", 1)
    sim_args = {"model": model, "hardware": _hardware(str(row["gpu"])),
                **parallel, **_precision(str(row["precision"]), notes)}
    metric, scale = _metric(str(row["metric"]))
    scale *= engines
    if str(row["metric"]).endswith("per node"):
        scale /= int(row["num_gpus"]) / GPUS_PER_NODE
    sim_args.update(_ep_options(str(row.get("workload", "")), sim_args, notes))
    workload = workload_of(row, metric, notes, sim_args.get("dp_size", 1), engines, layout)
    sim_args.update(engine_args(row, notes, sim_args, workload))
    if layout is not None:
        sim_args.update(layout.sim_args)
    if workload.concurrency is not None:
        sim_args["max_running_requests"] = workload.concurrency
    sim_args.update(_batch_limits(str(row.get("workload", "")), metric, sim_args, notes))
    return RowSpec(str(row["id"]), source_name(str(row["source"])), float(row["value"]),
                   str(row["unit"]), metric, workload, sim_args, scale,
                   _groups(row, sim_args, metric, workload), tuple(notes))


def _model(repo: str) -> str:
    name = repo.lower()
    for part, key in MODELS:
        if part in name:
            return key
    raise Refused(f"model {repo!r} has no embedded config")


def _hardware(gpu: str) -> str:
    for prefix, key in HARDWARE:
        if gpu.startswith(prefix) and key is not None:
            return key
        if gpu.startswith(prefix):
            break
    raise Refused(f"GPU {gpu!r} is not in the hardware catalogue")


def _precision(text: str, notes: list[str]) -> dict[str, str]:
    token, low = text.split()[0].rstrip(",;"), text.lower()
    quantization = {"fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}.get(token, "none")
    if "fp8_e5m2" in low:
        return {"quantization": quantization, "kv_cache_dtype": "fp8_e5m2"}
    fp8_kv = any(f in low for f in ("kv cache fp8", "fp8 kv", "kv fp8")) and "not fp8" not in low
    if "modelopt" in low and "kv dtype not stated" in low:
        notes.append(MODELOPT_KV)
        fp8_kv = True
    return {"quantization": quantization, "kv_cache_dtype": "fp8_e4m3" if fp8_kv else "auto"}


def _parallelism(row: Mapping[str, Any], notes: list[str], submitted: Any = None
                 ) -> dict[str, Any]:
    """tp, ep_size and attention DP; `engines` > 1 for independent replicas (dp > 1 at tp 1,
    or a `submitted` layout of fewer GPUs than the system's), run as one engine."""
    tp, dp, ep = (_int_or_none(row[k]) for k in ("tp", "dp", "ep"))
    if submitted is not None:
        tp, engines = _layout_engines(row, submitted, notes)
        return {"tp": tp, "ep_size": 1, "engines": _replicas(engines, notes) if engines > 1 else 1}
    if tp is None:
        raise Refused("the parallel layout (tp) is not published")
    if dp is not None and dp > 1 and tp == 1:
        return {"tp": 1, "ep_size": 1, "engines": _replicas(dp, notes)}
    if dp is None and tp > 1 and "attention DP" in str(row.get("caveat", "")):
        notes.append(f"attention DP on, dp not published: dp {tp} (TRT-LLM's "
                     f"enable_attention_dp gives every rank its own attention)")
        dp = tp
        if ep is None:
            notes.append(f"ep not published: ep {tp} (every rank holds 1 / {tp} of the experts)")
            ep = tp
    if dp is not None and dp > tp:
        raise Refused(f"dp={dp} above tp={tp} is not modelled")
    if ep is None:
        notes.append("ep not published: experts sharded by TP (ep 1)")
    layout: dict[str, Any] = {"tp": tp, "ep_size": ep or 1}
    if dp is not None and dp > 1:
        notes.append("attention DP: the requests spread evenly over the attention ranks")
        layout.update(dp_size=dp, enable_dp_attention=True)
    return layout


def _layout_engines(row: Mapping[str, Any], layout: Any, notes: list[str]
                    ) -> tuple[int, int]:
    """(tp, engines) of a submitter's layout (`experiments.published_check.mlperf`)."""
    if layout.pp > 1:
        raise Refused(f"pipeline parallelism {layout.pp} is not modelled ({layout.source})")
    if layout.refused:
        raise Refused(f"{layout.refused} ({layout.source})")
    notes.append(f"layout from the submission: {layout.source}")
    return layout.tp, int(row["num_gpus"]) // layout.tp


def _replicas(engines: int, notes: list[str]) -> int:
    """Independent engines of one run: each gets an even share of the requests (under a
    rate, a random split of Poisson arrivals: Poisson at rate / engines), so one is
    simulated and the throughput is that engine's times their count."""
    notes.append(f"{engines} independent engines, the requests spread evenly: one engine "
                 f"simulated (its share of the prompts and of the arrival rate), its "
                 f"throughput x {engines}")
    return engines


def _metric(metric: str) -> tuple[str, float]:
    if metric not in METRICS:
        raise Refused(f"metric {metric!r} has no simulator counterpart")
    return METRICS[metric]


def _ep_options(workload: str, sim_args: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """SGLang's wide-EP flags named in the workload text (DeepEP, dense FFN DP, two-batch
    overlap, EPLB), as `ep_options`."""
    from sim.model.ep_options import EPOptions

    if "DeepEP" not in workload:
        return {}
    # NOTE: the LMSYS runs' reproduction steps (SGLang issue 6017) launch both phases with
    # --moe-dense-tp-size 1 and --ep-num-redundant-experts 32.
    # The data-parallel LM head is the recipe's later form (its decode scripts pass
    # --enable-dp-lm-head); the post does not say how the head ran.
    notes.append(f"DeepEP with dense FFN DP and {REDUNDANT_EXPERTS} redundant experts "
                 f"(the launch commands in SGLang issue 6017); LM head data-parallel "
                 f"(--enable-dp-lm-head, assumed)")
    options = EPOptions("deepep", 1, dp_lm_head=True,
                        two_batch_overlap="two-batch overlap" in workload,
                        redundant_experts=REDUNDANT_EXPERTS)
    return {"ep_options": options}


def _batch_limits(workload: str, metric: str, sim_args: Mapping[str, Any], notes: list[str]
                  ) -> dict[str, Any]:
    """A prefill-only stress test's batch per device (x the attention ranks); a decode-only
    one's CUDA graphs up to the published batch."""
    dp = sim_args.get("dp_size", 1)
    tokens = PREFILL_TOKENS_PER_DEVICE * dp
    limits = {"chunked_prefill_size": tokens, "max_prefill_tokens": tokens}
    if metric == "input_throughput":
        notes.append(f"prefill batch {PREFILL_TOKENS_PER_DEVICE} tokens per device")
        return limits
    if metric == "decode_throughput" and "CUDA graphs" in workload:
        return {**limits, "cuda_graph_max_bs": sim_args["max_running_requests"] // dp}
    return limits if metric == "decode_throughput" else {}


def _groups(row: Mapping[str, Any], sim_args: Mapping[str, Any], metric: str,
            workload: WorkloadSpec) -> tuple[str, ...]:
    from sim.model.from_config import get_model_shape

    groups = []
    if metric in ("output_throughput", "request_throughput"):
        groups.append("batch-1 decode" if workload.concurrency == 1 else
                      "offline throughput" if math.isinf(workload.rate) else "online throughput")
    groups.append({"ttft_mean": "online TTFT", "ttft_p50": "online TTFT", "itl_mean": "TPOT/ITL",
                   "itl_p50": "TPOT/ITL", "tpot_p50": "TPOT/ITL"}.get(metric, ""))
    groups += ["TP > 1"] * (sim_args["tp"] > 1)
    groups += ["MoE"] * (get_model_shape(sim_args["model"]).num_sparse_layers > 0)
    groups += ["fp8"] * (sim_args["quantization"] == "fp8" or str(row["precision"]).startswith("fp8"))
    groups += ["2025-26 engines"] * is_2025_engine(row)
    return tuple(g for g in groups if g)


def is_2025_engine(row: Mapping[str, Any]) -> bool:
    """A vLLM V1 run or an SGLang run whose version cell names 0.5 or later: the engines of
    the 2025-26 rows."""
    engine = profile_name(str(row.get("engine", "")))
    if engine == "vllm":
        return is_vllm_v1(row)
    version = VERSION.search(str(row.get("engine_version", "")))
    return (engine == "sglang" and version is not None
            and (int(version.group(1)), int(version.group(2))) >= (0, 5))


def _int_or_none(value: Any) -> int | None:
    text = str(value).strip()
    return int(text) if text.isdigit() else None
