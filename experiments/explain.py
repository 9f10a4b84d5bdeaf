"""The golden example (DESIGN.md §4) as both executors see it, step by step.

exec runs it for real: `TorchModelRunner` on a tiny random-weight Llama (CPU, float32, greedy,
weights from a fixed seed). sim runs it again on a fresh scheduler: `SimModelRunner` prices
each batch with a roofline cost model and replays the tokens exec sampled
(`ReplayTokenSource` of exec's trace). Both go through the SimPy driver under the same clock
(the roofline), as the agreement tests do, so their schedules should be identical.

Each step is the ForwardBatch fields the runner got, the logit rows it used and the ids it
sampled (the next decode inputs), once per executor, with the fields that differ named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from exec.llama import LlamaForCausalLM
from exec.model_config import ModelConfig
from exec.model_runner import TorchModelRunner
from exec.torch_threads import torch_threads
from shared.engine_config import EngineConfig, ModelInfo
from shared.forward_batch import ForwardBatch
from shared.model_runner import ModelRunner, RunnerOutput
from shared.sampling_params import SamplingParams
from shared.scheduler import Scheduler
from shared.trace import Trace
from shared.workload import Workload, WorkloadRequest
from sim.driver import drive_workload
from sim.hardware import get_hardware
from sim.model_shapes import get_model_shape
from sim.roofline import RooflineCostModel
from sim.sim_model_runner import SimModelRunner
from sim.token_source import ReplayTokenSource

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
               "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": 64, "eos_token_id": 0, "torch_dtype": "float32"}
# DESIGN §4's configuration: page_size 1, fcfs, no chunking, no mixed chunk.
ENGINE = EngineConfig(max_total_tokens=256, chunked_prefill_size=None, disable_cuda_graph=True,
                      disable_overlap_schedule=True)  # DESIGN §4's schedule
GREEDY = {"temperature": 0.0, "ignore_eos": True}
REQUESTS = (("warm", 0.0, (21, 22, 23), 1),
            ("a", 1.0, (11, 12, 13, 14, 15, 16), 2),
            ("b", 1.0, (21, 22, 23, 24, 25, 26), 2))
NOTES = ("warm-up: request 'warm' leaves [21, 22, 23] in the radix cache",
         "DESIGN §4 EXTEND: 'a' computes 6 rows; 'b' reuses 3 cached tokens, computes 3",
         "DESIGN §4 DECODE: the ids the EXTEND sampled are the inputs")
ARRAY_FIELDS = ("input_ids", "positions", "seq_lens", "extend_prefix_lens", "extend_seq_lens",
                "extend_start_loc", "out_cache_loc", "req_pool_indices")
FIELDS = ("forward_mode", "batch_size", "rids", *ARRAY_FIELDS, "selected_rows", "logits_shape",
          "next_token_ids")
EXTEND_ONLY = ("extend_prefix_lens", "extend_seq_lens", "extend_start_loc")


def golden_workload() -> Workload:
    """'warm' at t=0, then 'a' and 'b' at t=1 s (after 'warm' finished)."""
    return Workload(tuple(
        WorkloadRequest(rid, t, ids, SamplingParams(max_new_tokens=n, **GREEDY))
        for rid, t, ids, n in REQUESTS), name="design-4-golden")


def tiny_model(seed: int) -> LlamaForCausalLM:
    """A random-weight tiny Llama (TINY_CONFIG), the same weights for the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(ModelConfig.from_dict(TINY_CONFIG))


class Recorder:
    """Wraps a ModelRunner; keeps, per forward, what it was given and what it produced
    (plain ints, copied at once: the batch's arrays are the scheduler's)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.steps: list[dict[str, Any]] = []

    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        out = self.runner.forward(fb)
        self.steps.append(batch_view(fb, out))
        return out

    def sample(self, output: RunnerOutput, fb: ForwardBatch) -> np.ndarray:
        ids = self.runner.sample(output, fb)
        self.steps[-1]["next_token_ids"] = np.asarray(ids).tolist()
        return ids


def batch_view(fb: ForwardBatch, out: RunnerOutput) -> dict[str, Any]:
    """The ForwardBatch fields a runner reads and the logit rows it reports using."""
    view: dict[str, Any] = {"forward_mode": fb.forward_mode.name, "batch_size": fb.batch_size,
                            "rids": list(fb.rids)}
    for name in ARRAY_FIELDS:
        view[name] = np.asarray(getattr(fb, name)).tolist()
    view["selected_rows"] = np.asarray(out.logit_rows.pruned_rows).tolist()
    view["logits_shape"] = [int(n) for n in out.logits_shape]
    return view


def run_exec(seed: int, clock: RooflineCostModel) -> tuple[list[dict[str, Any]], Trace]:
    info = ModelInfo(TINY_CONFIG["vocab_size"], (TINY_CONFIG["eos_token_id"],),
                     TINY_CONFIG["max_position_embeddings"])
    scheduler = Scheduler(ENGINE, info)
    with torch_threads(1):
        runner = Recorder(TorchModelRunner(tiny_model(seed), scheduler.config, info))
        trace = drive_workload(scheduler, runner, golden_workload(), clock=clock)
    return runner.steps, trace


def run_sim(reference: Trace, clock: RooflineCostModel) -> tuple[list[dict[str, Any]], Trace]:
    """A fresh scheduler on the effective config exec recorded, tokens replayed from it."""
    scheduler = Scheduler(reference.engine_config, reference.model_info)
    source = ReplayTokenSource(reference)
    runner = Recorder(SimModelRunner(clock, source, scheduler.config, reference.model_info))
    trace = drive_workload(scheduler, runner, golden_workload(), clock=clock,
                           finished_hook=source.finished)
    return runner.steps, trace


def explain(seed: int = 0, hardware: str = "h100") -> dict[str, Any]:
    """Run the golden example on both executors; one entry per step, exec beside sim."""
    clock = RooflineCostModel(get_model_shape(TINY_CONFIG, "fp32", "fp32"),
                              get_hardware(hardware))
    exec_steps, exec_trace = run_exec(seed, clock)
    sim_steps, sim_trace = run_sim(exec_trace, clock)
    priced_ms = [round(r.duration * 1e3, 4) for r in sim_trace.steps]   # one per sim forward
    steps = [step_entry(i, e, s, priced_ms[i])
             for i, (e, s) in enumerate(zip(exec_steps, sim_steps, strict=False))]
    records_agree = (len(exec_trace.steps) == len(sim_trace.steps) and all(
        a.diff(b) is None for a, b in zip(exec_trace.steps, sim_trace.steps, strict=True)))
    return {"example": "DESIGN.md §4", "seed": seed,
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
