"""The SimPy driver runs exec's torch runner under a cost-model clock (ARCHITECTURE §5), and a sim
replay of that run's tokens schedules identically. Tokens: the real model's greedy ids,
replayed by sim (ignore_eos workload, so only max_new_tokens ends a request)."""

import json

from exec.engine.engine import Engine
from shared import SamplingParams, Synthetic
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.build import build_simulation
from sim.run.driver import drive_workload
from sim.run.token_source import ReplayTokenSource

ENGINE = {"max_total_tokens": 1024, "chunked_prefill_size": 16}


def test_torch_runner_under_sim_clock_matches_a_sim_replay(tiny_checkpoint):
    """exec's runner driven in simulated time: durations are the clock's prices, and sim
    replaying its tokens gives the same StepRecords (times ignored)."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, **ENGINE)
    config = json.loads((folder / "config.json").read_text())
    clock = RooflineCostModel(get_model_shape(config), get_hardware("h100"))
    workload = Synthetic(6, 20, 8,
                         sampling_params=SamplingParams(temperature=0, ignore_eos=True)).build(
                             vocab_size=engine.model_info.vocab_size, seed=0, rate=100.0)
    recorded = drive_workload(engine.scheduler, engine.runner, workload, clock=clock)
    assert all(r.output_len == 8 for r in recorded.requests.values())

    sim = build_simulation(model=config, cost_model=clock, disable_cuda_graph=True,
                           token_source=ReplayTokenSource(recorded), **ENGINE)
    assert sim.scheduler.config == engine.scheduler.config
    replayed = drive_workload(sim.scheduler, sim.runner, workload,
                              finished_hook=sim.token_source.finished)
    assert len(replayed.steps) == len(recorded.steps) > len(workload)
    for a, b in zip(recorded.steps, replayed.steps, strict=True):
        assert a.diff(b) is None
        assert a.start_time == b.start_time and a.duration == b.duration
