"""`report.md` of a `batchtwin plan`: Recommendation, Steady state, Headroom, Limits, Sweep,
Plots, Files.

Values at the chosen rate are the worst over the seeds (largest latency, highest load).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from experiments.plan.grid import KNOBS, RUN_AXES, Candidate, show
from experiments.plan.headroom import CAPACITY, HEADROOM, OperatingPoint
from experiments.plan.point import PlanSpec, PointResult
from experiments.plan.search import Outcome
from experiments.plan.slo import format_rate, format_seconds
from experiments.plan.steady_state import (
    CONVERGENCE_TOLERANCE,
    GROWTH_TOLERANCE,
    LIFETIMES,
    MAX_SCALE,
    WARMUP_FRACTION,
)
from sim.cost.model_error import NO_BAND, error_band

SECTIONS = ("Recommendation", "Steady state", "Headroom", "Limits", "Sweep")
LOAD_ROWS = (("kv_used_peak", "KV slots in use, peak (with prefix cache)", "pct"),
             ("kv_active_peak", "KV held by running requests, peak", "pct"),
             ("num_retractions", "decode retractions", "int"),
             ("busy", "engine busy", "pct"),
             ("queue_mean", "waiting requests, mean", "f1"),
             ("queue_max", "waiting requests, max", "int"),
             ("decode_batch_mean", "decode batch, mean", "f1"),
             ("decode_batch_max", "decode batch, max", "int"),
             ("kv_blocked", "decode steps with requests waiting for KV", "pct"),
             ("cap_blocked", "decode steps with requests waiting at max_running", "pct"))


def render_report(spec: PlanSpec, ranked: Sequence[Outcome], plots: Sequence[str],
                  files: Sequence[str], target: Any = None,
                  operating: OperatingPoint | None = None) -> str:
    """`target`: (rate, choice, prices) of --target-rate, or None; `operating`: the best's
    recommended operating point (`experiments.plan.headroom`)."""
    from experiments.plan.fleet_choice import target_section

    best = ranked[0]
    parts = [_title(spec, len(ranked)), recommendation(spec, best, operating)]
    if target is not None and target.rate:
        parts.append(target_section(target.choice, target.rate, target.prices))
    parts += [steady_state(best), headroom(spec, best), limits(best), sweep(ranked)]
    if plots:
        parts.append("## Plots\n\n" + "\n\n".join(f"![{p}]({p})" for p in plots))
    parts.append("## Files\n\n" + "\n".join(f"- `{f}`" for f in files))
    return "\n\n".join(parts) + "\n"


def _title(spec: PlanSpec, n: int) -> str:
    w = spec.workload
    return (f"# batchtwin plan: {spec.model}, {w.workload} workload\n\n"
            f"SLOs: {spec.slo}. {n} configuration(s). Each rate runs at least {w.num_requests} "
            f"requests (burstiness {w.burstiness:g}) once per seed "
            f"({', '.join(map(str, spec.seeds))}), more until it reaches a steady state (see "
            f"Steady state); a rate passes when every seed meets every objective in its "
            f"measurement window and its queue does not grow. Rates are found to within "
            f"{spec.rate_tolerance:.0%} and never above the saturation throughput (the "
            f"completion rate of a full engine, from a run with every request at t=0): a finite "
            f"run above it can still meet the SLOs, a long one cannot. Goodput = rate x the "
            f"fraction of requests meeting every per-request limit.")


def recommendation(spec: PlanSpec, best: Outcome, operating: OperatingPoint | None = None) -> str:
    head = "## Recommendation\n\n"
    if not best.feasible:
        return head + ("**No configuration meets the SLOs**, even at the lowest rate tried "
                       f"(1/{round(1 / spec.min_rate_fraction)} of its saturation throughput). "
                       "Loosen the SLOs, shorten the workload's prompts or outputs, or try "
                       "faster hardware or a higher TP degree; see Limits.")
    rate = best.rate or 0.0
    cap = " (capped at its saturation throughput; see Limits)" if best.capped else ""
    run = best.at_rate[0]
    return head + (f"**{best.candidate.label}** ({gpus(best.candidate.num_gpus)}) at "
                   f"**{format_rate(rate)} req/s** at most{cap}: goodput "
                   f"{format_rate(best.goodput)} req/s, "
                   f"**{format_rate(best.goodput_per_gpu)} req/s per GPU**.\n\n"
                   f"{operating_text(operating, rate)}\n\n"
                   f"Max rate {rate_band(spec, rate)}.\n\n"
                   f"Reproduce the run at the max rate (`--warmup`: its measurement window):"
                   f"\n\n```\n{simulate_command(spec, best.candidate, rate, run)}\n```")


def gpus(n: int) -> str:
    """"1 GPU", "8 GPUs"."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def operating_text(operating: OperatingPoint | None, rate: float) -> str:
    if operating is None:
        return ""
    if operating.rate is None:
        return (f"**No headroom**: even the lowest rate tried runs {operating.binding} at "
                f"{operating.pressure:.0%} of its limit; serve below the max rate only with "
                f"margin to spare elsewhere, or add GPUs.")
    head = (f"**Recommended operating point: {format_rate(operating.rate)} req/s** "
            f"({operating.rate / rate:.0%} of the max rate)")
    why = ("capped there: near the max rate the queue, and TTFT, climb steeply"
           if operating.binding == CAPACITY else
           f"where the binding objective, {operating.binding}, reaches {operating.pressure:.0%} "
           f"of its limit, below {HEADROOM:.0%} of the max rate")
    return f"{head}, {why}: room for a busier hour, bursts and the cost model's error."


def steady_state(best: Outcome) -> str:
    """How the runs at the max rate (or the lowest rate tried) reached their verdict."""
    runs = best.at_rate if best.feasible else best.at_failed
    rows = [[str(r.point.seed), f"{r.metrics.get('num_requests', math.nan):.0f}",
             _secs(r.metrics.get("warmup_s")), _secs(r.metrics.get("window_s")),
             f"{r.metrics.get('window_requests', math.nan):.0f}",
             f"{r.metrics.get('queue_growth', math.nan):+.1%}",
             f"{r.metrics.get('half1_batch', math.nan):.1f} / {r.metrics.get('half2_batch', math.nan):.1f}",
             "; ".join(r.violations) or "passed"] for r in runs]
    return (f"## Steady state\n\nAt {format_rate(runs[0].point.rate)} req/s, per seed: the "
            f"requests simulated, the warm-up left out (the larger of {WARMUP_FRACTION:.0%} of "
            f"the arrivals' span and the p90 request lifetime), the measurement window, the "
            f"growth of the queue (requests waiting for their first token) over it (above "
            f"{GROWTH_TOLERANCE:.0%} of its requests, and beyond a stable queue's wander, the "
            f"rate is unsustainable) and the mean running "
            f"batch of its two halves. A run is made twice as long until the halves agree "
            f"within {CONVERGENCE_TOLERANCE:.0%} (each objective, of its limit; the batch) and "
            f"the window spans {LIFETIMES:g} p90 lifetimes (up to {MAX_SCALE}x the requests; "
            f"`experiments.plan.steady_state`).\n\n"
            + table(["seed", "requests", "warm-up", "window", "window requests",
                     "queue growth", "batch (halves)", "verdict"], rows))


def _secs(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f} s"


def plan_error(spec: PlanSpec):
    """The cost model's measured error (`sim.cost.model_error`) on the published runs most
    like a plan: online (served at a request rate), of a dense or an MoE model; None when
    the model has none."""
    from sim.run.build import load_model

    moe = load_model(spec.model)[1].moe is not None
    return error_band(spec.cost_model, f"online {'MoE' if moe else 'dense'}")


def rate_band(spec: PlanSpec, rate: float) -> str:
    """"12.4 req/s (11.0-13.8 req/s, ±11.0%: the kernel cost model's median |error| on 7
    published online dense runs, python -m experiments.published_check)", or the rate with
    NO_BAND."""
    error = plan_error(spec)
    if error is None:
        return f"{format_rate(rate)} req/s ({NO_BAND})"
    low, high = error.band(rate)
    return f"{format_rate(rate)} req/s ({format_rate(low)}-{format_rate(high)} req/s, {error.describe()})"


def engine_flags(profile) -> str:
    """--engine-profile (and --num-scheduler-steps) of a plan's profile; "" for the default."""
    if profile is None:
        return ""
    steps = f" --num-scheduler-steps {profile.scheduler_steps}" if profile.scheduler_steps > 1 else ""
    return f"--engine-profile {profile.name}{steps}"


def simulate_command(spec: PlanSpec, c: Candidate, rate: float,
                     run: PointResult | None = None) -> str:
    """The `batchtwin simulate` command of one run of the plan: `run`'s request count and
    window (--warmup), else the plan's --num-requests."""
    w, knobs, slo = spec.workload, c.engine_args(), spec.slo.per_request()
    metrics = run.metrics if run is not None else {}
    n = int(metrics.get("num_requests", w.num_requests))
    warmup = metrics.get("warmup_s")
    seed = run.point.seed if run is not None else spec.seeds[0]
    dp = f" --dp {c.dp} --router {spec.router}" if c.dp > 1 else ""
    dp += f" --disaggregate {c.disaggregate} --router {spec.router}" if c.disaggregate else ""
    lines = [f"batchtwin simulate --model {spec.model} --hardware {c.hardware} --tp {c.tp}{dp}",
             f"--cost-model {spec.cost_model}" if spec.cost_model else "",
             engine_flags(spec.engine_profile), run_flags(spec, c),
             f"--workload {w.workload} --num-requests {n} --rate {rate:.10g} "
             f"--burstiness {w.burstiness:g} --seed {seed}"
             + (f" --warmup {warmup:.6g}" if warmup is not None and math.isfinite(warmup) else "")]
    lengths = [f"--{k.replace('_', '-')} {v}" for k, v in
               (("prompt_len", w.prompt_len), ("output_len", w.output_len)) if v is not None]
    if w.workload == "shared-prefix":
        lengths.append(f"--num-groups {w.num_groups} --system-prompt-len {w.system_prompt_len}")
    if lengths:
        lines.append(" ".join(lengths))
    chunk = knobs["chunked_prefill_size"]
    lines.append(" ".join([f"--chunked-prefill-size {chunk if chunk is not None else -1}",
                           *(f"--{k.replace('_', '-')} {knobs[k]}" for k in KNOBS[1:]
                             if knobs[k] is not None)]))
    lines.append(" ".join(f"--slo-{m.replace('_', '-')} {getattr(slo, m):g}"
                          for m in ("ttft", "tpot", "e2e", "max_itl")
                          if getattr(slo, m) is not None))
    return " \\\n    ".join(line for line in lines if line)


def run_flags(spec: PlanSpec, c: Candidate) -> str:
    """--ep-size, --quantization, --kv-cache-dtype and --expert-zipf where not the default."""
    flags = [f"--ep-size {c.ep_size}" if c.ep_size > 1 else "",
             f"--quantization {c.quantization}" if c.quantization is not None else "",
             f"--kv-cache-dtype {c.kv_cache_dtype}" if c.kv_cache_dtype != "auto" else "",
             f"--expert-zipf {spec.expert_zipf:g}" if spec.expert_zipf else ""]
    return " ".join(f for f in flags if f)


def headroom(spec: PlanSpec, best: Outcome) -> str:
    runs = best.at_rate if best.feasible else best.at_failed
    rate = runs[0].point.rate
    rows = []
    for o in spec.slo.objectives:
        value = max(r.metrics[o.key] for r in runs)
        rows.append([o.key, format_seconds(o.limit), format_seconds(value),
                     f"{1 - value / o.limit:+.0%}"])
    text = (f"## Headroom\n\nWorst seed at {format_rate(rate)} req/s "
            f"({best.candidate.label}):\n\n" + table(["objective", "limit", "value", "headroom"],
                                                      rows))
    if not best.feasible:
        return text + "\n\nNegative headroom: the objective is missed by that much."
    attain = min(r.metrics["attainment"] for r in best.at_rate)
    text += f"\n\n{attain:.1%} of requests meet every per-request limit (worst seed). "
    if best.failed_rate is not None:
        miss = next(r for r in best.at_failed if not r.passed)
        text += (f"The lowest rate that misses, {format_rate(best.failed_rate)} req/s "
                 f"(+{best.failed_rate / rate - 1:.0%}): {'; '.join(miss.violations)}. ")
    return text + (f"Saturation throughput: {format_rate(best.saturation)} req/s "
                   f"({rate / best.saturation:.0%} of it in use).")


def limits(best: Outcome) -> str:
    text = (f"## Limits\n\n**{best.limit.kind}** binds ({best.candidate.label}): "
            f"{best.limit.reason}.\n\n")
    missing = "lowest rate missing the SLOs" if best.feasible else "lowest rate tried"
    columns = [("chosen rate", best.at_rate), (missing, best.at_failed),
               ("saturation probe", (best.probe,))]
    columns = [(name, runs) for name, runs in columns if runs]
    rates = [f"{name} ({format_rate(runs[0].point.rate)} req/s)" for name, runs in columns]
    rows = [[label, *(_fmt(max(r.metrics[key] for r in runs), kind) for _, runs in columns)]
            for key, label, kind in LOAD_ROWS]
    capacity = best.probe.metrics
    text += table(["load (worst seed)", *rates], rows)
    return text + (f"\n\nKV capacity {capacity['kv_capacity']:.0f} tokens, max_running_requests "
                   f"{capacity['max_running']:.0f} (effective). The Sweep table names the "
                   f"binding limit of every configuration.")


def sweep(ranked: Sequence[Outcome]) -> str:
    header = ["rank", "hardware", "tp", "dp", "GPUs", *RUN_AXES, *KNOBS, "max rate (req/s)",
              "goodput/GPU (req/s)", "saturation (req/s)", "limit"]
    rows = []
    for i, o in enumerate(ranked, 1):
        c = o.candidate
        rate = "-" if o.rate is None else format_rate(o.rate) + (" (cap)" if o.capped else "")
        rows.append([str(i) if o.feasible else "-", c.hardware, str(c.tp), str(c.dp),
                     str(c.num_gpus),
                     *(show(c, k) for k in (*RUN_AXES, *KNOBS)), rate, format_rate(o.goodput_per_gpu),
                     format_rate(o.saturation), o.limit.kind])
    return "## Sweep\n\n" + table(header, rows)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _fmt(value: float, kind: str) -> str:
    if not math.isfinite(value):
        return "-"
    return {"pct": f"{value:.0%}", "int": f"{value:.0f}", "f1": f"{value:.1f}"}[kind]


def runs_frame(results: Sequence[PointResult]) -> Any:
    """One row per run (PointResult.row); None knobs stay empty, the others integers."""
    import pandas as pd

    return integer_knobs(pd.DataFrame([r.row() for r in results]))


def sweep_frame(ranked: Sequence[Outcome], error: Any = None,
                prices: dict[str, float] | None = None) -> Any:
    """One row per configuration, best first; `rate_low`/`rate_high` bound `max_rate` by the
    cost model's measured `error` (`plan_error`; empty when None); `num_gpus` and
    `cost_per_mtok` ($ per million output tokens at max_rate; NaN without prices)."""
    import pandas as pd

    from experiments.plan.fleet_choice import cost_per_mtok

    return integer_knobs(pd.DataFrame([
        {**o.candidate.to_dict(), "num_gpus": o.candidate.num_gpus, "feasible": o.feasible,
         "max_rate": o.rate, "cost_per_mtok": cost_per_mtok(o, o.rate, prices or {}),
         **band_columns(error, o.rate),
         "capped_at_saturation": o.capped, "goodput": o.goodput,
         "goodput_per_gpu": o.goodput_per_gpu, "saturation": o.saturation,
         "first_failed_rate": o.failed_rate, "limit": o.limit.kind,
         "limit_reason": o.limit.reason} for o in ranked]))


def band_columns(error, rate: float | None) -> dict[str, float | None]:
    """{"rate_low", "rate_high"}: `rate` -/+ the model's median |error| (None without one)."""
    low, high = error.band(rate) if error is not None and rate is not None else (None, None)
    return {"rate_low": low, "rate_high": high}


def integer_knobs(frame: Any) -> Any:
    for k in ("chunked_prefill_size", "max_running_requests", "page_size"):
        frame[k] = frame[k].astype("Int64")
    return frame
