"""The golden example (ARCHITECTURE.md §4) as both executors see it, step by step.

exec runs it for real: `TorchModelRunner` on a tiny random-weight Llama (CPU, float32, greedy,
weights from a fixed seed). sim runs it again on a fresh scheduler: `SimModelRunner` prices
each batch with a roofline cost model and replays the tokens exec sampled
(`ReplayTokenSource` of exec's trace). Both go through the SimPy driver under the same clock
(the roofline), as the agreement tests do, so their schedules should be identical.

Each step is the ForwardBatch fields the runner got, the logit rows it used and the ids it
sampled (the next decode inputs), once per executor, with the fields that differ named.
The simulator's side (workload, recorder, `run_sim`) is experiments.golden_example, which
needs no torch.
"""

from __future__ import annotations

from typing import Any

import torch

from exec.device.torch_threads import torch_threads
from exec.models import runnable_config
from exec.models.llama import LlamaForCausalLM
from exec.runner.model_runner import TorchModelRunner
from experiments.golden_example import (
    ENGINE,
    FIELDS,
    NOTES,
    TINY_CONFIG,
    TINY_INFO,
    Recorder,
    golden_workload,
    priced_ms,
    roofline_clock,
    run_sim,
)
from shared.loop.scheduler import Scheduler
from shared.trace.trace import Trace
from sim.cost.roofline.model import RooflineCostModel
from sim.run.driver import drive_workload
from sim.run.token_source import ReplayTokenSource


def tiny_model(seed: int) -> LlamaForCausalLM:
    """A random-weight tiny Llama (TINY_CONFIG), the same weights for the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(runnable_config(TINY_CONFIG))


def run_exec(seed: int, clock: RooflineCostModel) -> tuple[list[dict[str, Any]], Trace]:
    scheduler = Scheduler(ENGINE, TINY_INFO)
    with torch_threads(1):
        runner = Recorder(TorchModelRunner(tiny_model(seed), scheduler.config, TINY_INFO))
        trace = drive_workload(scheduler, runner, golden_workload(), clock=clock)
    return runner.steps, trace


def explain(seed: int = 0, hardware: str = "h100") -> dict[str, Any]:
    """Run the golden example on both executors; one entry per step, exec beside sim."""
    clock = roofline_clock(hardware)
    exec_steps, exec_trace = run_exec(seed, clock)
    source = ReplayTokenSource(exec_trace)  # a fresh scheduler on the config exec recorded
    sim_steps, sim_trace = run_sim(exec_trace.engine_config, exec_trace.model_info, source, clock)
    prices = priced_ms(sim_trace)
    steps = [step_entry(i, e, s, prices[i])
             for i, (e, s) in enumerate(zip(exec_steps, sim_steps, strict=False))]
    records_agree = (len(exec_trace.steps) == len(sim_trace.steps) and all(
        a.diff(b) is None for a, b in zip(exec_trace.steps, sim_trace.steps, strict=True)))
    return {"example": "ARCHITECTURE.md §4", "seed": seed,
            "exec": f"TorchModelRunner, tiny random Llama (seed {seed}), cpu float32, greedy",
            "sim": f"SimModelRunner, roofline on {hardware}, tokens replayed from exec's trace",
            "steps": steps, "step_counts": [len(exec_steps), len(sim_steps)],
            "records_agree": records_agree,
            "agree": records_agree and len(exec_steps) == len(sim_steps)
            and not any(s["differs"] for s in steps)}


def step_entry(i: int, e: dict[str, Any], s: dict[str, Any], priced_ms: float) -> dict[str, Any]:
    """Step i: both views, the sim's priced step time and the FIELDS that differ."""
    return {"step": i, "note": NOTES[i] if i < len(NOTES) else "", "sim_priced_ms": priced_ms,
            "exec": e, "sim": s, "differs": [f for f in FIELDS if e.get(f) != s.get(f)]}
