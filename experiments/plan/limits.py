"""What binds a configuration's rate: KV capacity, compute or queueing, read off a run's steps.

`load_stats` reduces a run to a few load numbers (fractions of capacity are of the effective
`max_total_tokens`; "active" KV is what the running requests hold on decode steps, the sum of
their sequence lengths, while `kv_used_tokens` also counts the prefix cache). The scheduler
runs prefill first, so a decode step with requests waiting means none could be admitted:
`cap_blocked` counts such steps with the batch at max_running_requests, `kv_blocked` those
below it (the KV budget, which reserves room for the running requests' future tokens, refused
them). `diagnose` names the binding limit at the lowest rate that misses the SLOs, from
those numbers and the objectives it missed.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from experiments.plan.slo import format_rate

BUSY = 0.9           # engine busy at least this fraction of the run: compute saturated
BLOCKED = 0.2        # decode steps with requests waiting: admission is what binds


class Limit(NamedTuple):
    kind: str     # "KV capacity", "compute", "queueing" or "latency floor"
    reason: str


def load_stats(result: Any) -> dict[str, float]:
    """Load numbers of one run (module doc)."""
    steps, config = result.steps, result.trace.engine_config
    capacity, max_running = config.max_total_tokens, config.max_running_requests
    decode = (steps["forward_mode"] == "DECODE").to_numpy()
    active = active_tokens(result.trace)[decode]
    batch = steps["batch_size"].to_numpy()[decode]
    waiting = steps["queue_len"].to_numpy()[decode] > 0
    end = steps["start_time"] + steps["duration"]
    span = float(end.max() - steps["start_time"].min()) if len(steps) else math.nan
    return {
        "kv_capacity": float(capacity), "max_running": float(max_running),
        "kv_used_peak": float(steps["kv_used_tokens"].max()) / capacity,
        "kv_active_peak": float(active.max()) / capacity if active.size else 0.0,
        "busy": float(steps["duration"].sum()) / span if span > 0 else math.nan,
        "queue_mean": float(steps["queue_len"].mean()),
        "queue_max": float(steps["queue_len"].max()),
        "decode_batch_mean": float(batch.mean()) if batch.size else 0.0,
        "decode_batch_max": float(batch.max()) if batch.size else 0.0,
        "kv_blocked": _share(waiting & (batch < max_running)),
        "cap_blocked": _share(waiting & (batch >= max_running)),
    }


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if mask.size else 0.0


def active_tokens(trace: Any) -> np.ndarray:
    """[num_steps] tokens the step's batch holds in the KV cache (sum of its seq_lens)."""
    rows = trace.step_fields("step", "seq_lens")  # (at least two names: a tuple per step)
    return np.array([int(np.sum(lens)) for _, lens in rows], dtype=np.int64)


def diagnose(stats: dict[str, float], missed: tuple[str, ...]) -> Limit:
    """The limit a run that missed the objectives `missed` (metric names) ran into."""
    admission = admission_limit(stats)
    if admission is not None:
        return admission
    if any(m in ("tpot", "itl") for m in missed):
        return Limit("compute", f"decode steps slow down as the batch grows (mean decode batch "
                     f"{stats['decode_batch_mean']:.0f}, engine busy {stats['busy']:.0%})")
    if stats["busy"] >= BUSY:
        return Limit("compute", f"engine busy {stats['busy']:.0%} of the time, so arrivals "
                     f"queue for prefill (up to {stats['queue_max']:.0f} waiting)")
    return Limit("queueing", f"requests wait for prefill (mean queue {stats['queue_mean']:.1f}, "
                 f"engine busy {stats['busy']:.0%})")


def admission_limit(stats: dict[str, float]) -> Limit | None:
    """KV capacity or max_running_requests, when either kept waiting requests out."""
    if stats["num_retractions"] > 0:
        return Limit("KV capacity", f"{stats['num_retractions']:.0f} decode retractions: "
                     f"running requests outgrew the KV cache ({stats['kv_capacity']:.0f} tokens)")
    if stats["kv_blocked"] >= BLOCKED:
        return Limit("KV capacity", f"in {stats['kv_blocked']:.0%} of decode steps requests "
                     f"waited for KV space ({stats['kv_capacity']:.0f} tokens; running requests "
                     f"held up to {stats['kv_active_peak']:.0%} of it)")
    if stats["cap_blocked"] >= BLOCKED:
        return Limit("queueing", f"in {stats['cap_blocked']:.0%} of decode steps requests waited "
                     f"with max_running_requests ({stats['max_running']:.0f}) reached")
    return None


def saturated_limit(stats: dict[str, float], saturation: float) -> Limit:
    """The SLOs hold at the saturation throughput (`stats` of the probe): the rate is capped
    there, by whatever limits the batch when the engine is full."""
    what = admission_limit(stats) or Limit(
        "compute", f"the batch is not held back (mean decode batch "
        f"{stats['decode_batch_mean']:.0f}) and the engine is busy {stats['busy']:.0%}")
    return Limit(what.kind, f"the SLOs still hold at the saturation throughput "
                 f"({format_rate(saturation)} req/s), where {what.reason}; above it the queue grows "
                 f"without bound")


def floor_limit(rate: float, violations: tuple[str, ...]) -> Limit:
    """Even a lightly loaded engine misses the objectives."""
    return Limit("latency floor", f"even at {format_rate(rate)} req/s (a lightly loaded engine) the run "
                 f"misses: {'; '.join(violations)}")
