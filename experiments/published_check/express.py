"""`express(row)`: a calibration-set row (`../shared/reference/published-calibration-set.csv`,
columns as its `.md` explains) as a `RowSpec` the simulator runs, or `Unexpressed` naming
what the simulator cannot model yet. Each guess a row forces is written in its
`assumptions`, so the report says what was assumed where.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from experiments.published_check.row_spec import RowSpec, Unexpressed, WorkloadSpec
from experiments.published_check.sources import source_name

# Hugging Face repo (lower case, substring) -> embedded model key, most specific first.
MODELS = (("deepseek-r1", "deepseek-v3"), ("deepseek-v3", "deepseek-v3"),
          ("qwen3-235b-a22b", "qwen3-235b-a22b"), ("qwen3-30b-a3b", "qwen3-30b-a3b"),
          ("mixtral-8x22b", "mixtral-8x22b"), ("mixtral-8x7b", "mixtral-8x7b"),
          ("llama-3.1-405b", "llama-3.1-405b"), ("llama-3.1-70b", "llama-3.1-70b"),
          ("llama-3.3-70b", "llama-3.1-70b"), ("llama-3.1-8b", "llama-3.1-8b"),
          ("llama-2-70b", "llama-2-70b"), ("llama-2-13b", "llama-2-13b"),
          ("llama-2-7b", "llama-2-7b"))
NOT_MODELLED = {"llama-4-maverick": "Llama-4's interleaved dense/MoE layers and chunked "
                                    "attention are not modelled"}
HARDWARE = (("A100", "a100-80g"), ("H100", "h100"), ("H200", "h200"), ("B200", "b200"),
            ("MI300X", "mi300x"))
THROUGHPUT = {"Output token throughput (whole system)", "Output token throughput",
              "Total output token throughput", "Tokens per second"}
# metric -> (RunResult summary key, scale to the published unit)
METRICS = {**{m: ("output_throughput", 1.0) for m in THROUGHPUT},
           "Request throughput": ("request_throughput", 1.0),
           "Mean TTFT": ("ttft_mean", 1e3), "Mean first-token latency": ("ttft_mean", 1e3),
           "Mean ITL": ("itl_mean", 1e3), "Median TPOT": ("tpot_p50", 1e3)}
LOADGEN_PROMPTS = 3000


class _Refused(Exception):
    """A field the simulator cannot express; its message is the reason."""


def express(row: Mapping[str, Any]) -> RowSpec | Unexpressed:
    """The row as a run, or the first reason it cannot be one."""
    try:
        return _express(row)
    except _Refused as e:
        return Unexpressed(str(row["id"]), source_name(str(row["source"])), str(e))


def _express(row: Mapping[str, Any]) -> RowSpec:
    notes: list[str] = []
    model = _model(str(row["model"]))
    sim_args = {"model": model, "hardware": _hardware(str(row["gpu"])),
                **_parallelism(row, notes), **_precision(str(row["precision"]))}
    metric, scale = _metric(str(row["metric"]))
    workload = _workload(row, metric, notes)
    if workload.concurrency is not None:
        sim_args["max_running_requests"] = workload.concurrency
    return RowSpec(str(row["id"]), source_name(str(row["source"])), float(row["value"]),
                   str(row["unit"]), metric, workload, sim_args, scale,
                   _groups(row, sim_args, metric, workload), tuple(notes))


def _model(repo: str) -> str:
    name = repo.lower()
    for part, reason in NOT_MODELLED.items():
        if part in name:
            raise _Refused(reason)
    for part, key in MODELS:
        if part in name:
            return key
    raise _Refused(f"model {repo!r} has no embedded config")


def _hardware(gpu: str) -> str:
    for prefix, key in HARDWARE:
        if gpu.startswith(prefix):
            return key
    raise _Refused(f"GPU {gpu!r} is not in the hardware catalogue")


def _precision(text: str) -> dict[str, str]:
    token, low = text.split()[0], text.lower()
    if token == "nvfp4":
        raise _Refused("nvfp4 weights: the simulator has no fp4 dtype")
    quantization = "fp8" if token == "fp8" else "none"
    if "fp8_e5m2" in low:
        return {"quantization": quantization, "kv_cache_dtype": "fp8_e5m2"}
    fp8_kv = ("kv cache fp8" in low or "fp8 kv" in low) and "not fp8" not in low
    return {"quantization": quantization, "kv_cache_dtype": "fp8_e4m3" if fp8_kv else "auto"}


def _parallelism(row: Mapping[str, Any], notes: list[str]) -> dict[str, int]:
    tp, dp, ep = (_int_or_none(row[k]) for k in ("tp", "dp", "ep"))
    if tp is None:
        raise _Refused("the parallel layout (tp) is not published")
    if dp is None and tp > 1 and "attention DP" in str(row.get("caveat", "")):
        raise _Refused("attention data parallelism is not modelled")
    if dp is not None and dp > 1:
        kind = "attention data parallelism" if tp > 1 else f"{dp} data-parallel replicas"
        raise _Refused(f"{kind} (dp={dp}) is not modelled")
    if ep is None:
        notes.append("ep not published: experts sharded by TP (ep 1)")
    return {"tp": tp, "ep_size": ep or 1}


def _metric(metric: str) -> tuple[str, float]:
    if metric not in METRICS:
        raise _Refused(f"metric {metric!r} has no simulator counterpart")
    return METRICS[metric]


def _workload(row: Mapping[str, Any], metric: str, notes: list[str]) -> WorkloadSpec:
    rate, concurrency = _arrivals(str(row["request_rate_or_concurrency"]))
    inp, out, sharegpt = _lengths(str(row["input_len"]), str(row["output_len"]), notes)
    n = _num_prompts(str(row["num_prompts"]), concurrency, notes)
    if metric.startswith("ttft") and concurrency is not None:
        notes.append(f"TTFT of a closed loop: one round of {concurrency} request(s), no queueing")
        n = concurrency
    return WorkloadSpec(n, inp, out, rate, concurrency, sharegpt)


def _arrivals(text: str) -> tuple[float, int | None]:
    if text in ("inf", "offline"):
        return math.inf, None
    if text.startswith("rate="):
        return float(_first_number(text)), None
    if text.startswith("conc="):
        return math.inf, int(_first_number(text))
    raise _Refused(f"arrivals {text!r} (a per-phase or target-QPS run) are not modelled")


def _lengths(inp: str, out: str, notes: list[str]) -> tuple[int, int, bool]:
    if inp == out == "dataset:sharegpt":
        notes.append("ShareGPT lengths: the ShareGPT-like lognormal mix")
        return 0, 0, True
    if inp.startswith("mean=") and out.startswith("mean="):
        notes.append("ShareGPT-like lognormal lengths with the published means")
        return _first_number(inp), _first_number(out), True
    if inp.startswith("dataset") or out.startswith("dataset") or "n/" in out:
        raise _Refused(f"lengths {inp!r} / {out!r} are not published")
    if not inp[0].isdigit() or not out[0].isdigit():
        notes.append(f"lengths {inp!r} / {out!r} taken as fixed")
    return _first_number(inp), _first_number(out), False


def _num_prompts(text: str, concurrency: int | None, notes: list[str]) -> int:
    if text.isdigit():
        return int(text)
    if "rounds x concurrency" in text and concurrency is not None:
        return int(_first_number(text)) * concurrency
    if "default" in text:
        return int(_first_number(text.split("default", 1)[1]))
    notes.append(f"num_prompts {text!r}: {LOADGEN_PROMPTS}")
    return LOADGEN_PROMPTS


def _groups(row: Mapping[str, Any], sim_args: Mapping[str, Any], metric: str,
            workload: WorkloadSpec) -> tuple[str, ...]:
    from sim.model_shapes import get_model_shape

    groups = []
    if metric in ("output_throughput", "request_throughput"):
        groups.append("batch-1 decode" if workload.concurrency == 1 else
                      "offline throughput" if math.isinf(workload.rate) else "online throughput")
    groups.append({"ttft_mean": "online TTFT", "itl_mean": "TPOT/ITL",
                   "tpot_p50": "TPOT/ITL"}.get(metric, ""))
    groups += ["TP > 1"] * (sim_args["tp"] > 1)
    groups += ["MoE"] * (get_model_shape(sim_args["model"]).num_sparse_layers > 0)
    groups += ["fp8"] * (sim_args["quantization"] == "fp8" or str(row["precision"]).startswith("fp8"))
    return tuple(g for g in groups if g)


def _int_or_none(value: Any) -> int | None:
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def _first_number(text: str) -> int:
    match = re.search(r"\d+", text)
    if match is None:
        raise _Refused(f"no number in {text!r}")
    return int(match.group())
