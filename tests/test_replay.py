"""`sim.run.replay` and `batchtwin replay`: teacher-forced replay separates scheduling divergence
(agree_fraction, first_divergence) from timing-model error (mape, median_ape)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from exec.engine.engine import Engine
from experiments.main import main
from shared import (
    EngineConfig,
    ModelInfo,
    Req,
    SamplingParams,
    Scheduler,
    Synthetic,
    Trace,
)
from shared.batch.forward_batch import ForwardBatch
from sim import ReplayResult, replay
from sim.cost.calibrated import CalibratedCostModel
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.replay import default_cost_model
from sim.run.sim_model_runner import SimModelRunner
from sim.run.simulate import simulate
from sim.run.token_source import SyntheticTokenSource

MODEL = "smollm2-135m"
ENGINE = {"max_total_tokens": 900, "chunked_prefill_size": 64, "enable_mixed_chunk": True,
          "schedule_conservativeness": 0.3, "page_size": 4}


def _saved_sim_trace(tmp_path_factory, **engine):
    workload = Synthetic(24, 96, 48).build(vocab_size=49152, seed=5, rate=400.0)
    trace = simulate(workload, model=MODEL, hardware="h100", **ENGINE, **engine, keep_trace=True).trace
    path = tmp_path_factory.mktemp("replay") / "sim.jsonl"
    trace.save(path)
    return path


@pytest.fixture(scope="module")
def sim_trace_path(tmp_path_factory):
    """A simulated run (roofline, H100) with chunking, mixed steps and retractions, saved
    (the default, overlap schedule)."""
    return _saved_sim_trace(tmp_path_factory)


@pytest.fixture(scope="module")
def plain_sim_trace_path(tmp_path_factory):
    """The same run without the overlap schedule: every step costs device + CPU time."""
    return _saved_sim_trace(tmp_path_factory, disable_overlap_schedule=True)


def test_replay_of_a_sim_trace_agrees_everywhere_and_prices_it_exactly(sim_trace_path):
    """A sim trace replays 100%, and the header's roofline (cost_model=None) predicts its
    own recorded step times."""
    result = replay(sim_trace_path)
    assert isinstance(result, ReplayResult)
    assert (result.agree_fraction, result.first_divergence) == (1.0, None)
    assert list(result.steps.columns[:3]) == ["step", "measured", "predicted"]
    assert len(result.steps) == len(Trace.load(sim_trace_path).steps)
    assert result.mape < 1e-9 and result.median_ape < 1e-9
    steps = Trace.load(sim_trace_path).steps
    assert any(s.forward_mode == "MIXED" for s in steps) and any(-1 in s.next_token_ids for s in steps)
    assert any(r.num_retractions for r in Trace.load(sim_trace_path).requests.values())


def test_another_cost_model_changes_the_timing_error_not_the_schedule(plain_sim_trace_path):
    """Pricing the same recorded batches on an A100 gives a nonzero MAPE, equal to the mean
    of the per-step errors, while the schedule still agrees on every step. NOTE: without
    overlap: under it this tiny model's steps all cost their CPU time, on any GPU."""
    trace = Trace.load(plain_sim_trace_path)
    a100 = RooflineCostModel(get_model_shape(trace.model_config), get_hardware("a100-80g"))
    result = replay(trace, cost_model=a100)
    assert result.agree_fraction == 1.0
    ape = (result.steps.predicted - result.steps.measured).abs() / result.steps.measured
    assert result.mape == pytest.approx(ape.mean()) and result.mape > 0.01
    assert result.median_ape == pytest.approx(ape.median())


def test_a_tampered_step_is_the_only_one_that_disagrees(sim_trace_path):
    """Teacher forcing re-schedules from the replay's own state, so one altered recorded
    step (a wrong KV slot) is reported as the first divergence and nothing else differs."""
    trace = Trace.load(sim_trace_path)
    k = len(trace.steps) // 2
    bad = trace.steps[k]
    trace.steps[k] = dataclasses.replace(bad, out_cache_loc=(*bad.out_cache_loc[:-1], 0))
    result = replay(trace)
    assert result.first_divergence == k
    assert result.steps.diff_field.iloc[k] == "out_cache_loc"
    assert result.agree_fraction == pytest.approx(1 - 1 / len(trace.steps))


def test_a_different_engine_config_diverges(sim_trace_path):
    """A header claiming another chunk size re-schedules differently from some step on."""
    trace = Trace.load(sim_trace_path)
    trace.engine_config = dataclasses.replace(trace.engine_config, chunked_prefill_size=32)
    result = replay(trace)
    assert result.first_divergence is not None and result.agree_fraction < 1.0


def test_an_abort_while_waiting_is_replayed(tmp_path):
    """A request aborted in the waiting queue (max one running) is aborted by the replay
    before the step after its recorded finish, so the schedule still agrees."""
    info = ModelInfo(256, (0,), 512)
    sched = Scheduler(EngineConfig(max_total_tokens=256, max_running_requests=1), info)
    runner = SimModelRunner(RooflineCostModel(get_model_shape(MODEL), get_hardware("h100")),
                            SyntheticTokenSource(1, 256, (0,)), sched.config, info)
    for i in range(3):
        sched.add_request(Req(f"r{i}", [1 + i] * 8, SamplingParams(max_new_tokens=4), arrival_time=0.0))
    now = 0.0
    while sched.has_work() or sched.reqs:
        batch = sched.get_next_batch_to_run(now)
        if batch is None:
            break
        fb = ForwardBatch.init_new(batch)
        out = runner.forward(fb)
        sched.process_batch_result(batch, out, runner.sample(out, fb), now + out.duration)
        now += out.duration
        if len(sched.trace) == 2:
            assert sched.abort("r2", "client went away")
    trace = sched.trace
    assert trace.requests["r2"].finish_reason.type == "abort"
    result = replay(trace, cost_model=runner.cost_model)
    assert (result.agree_fraction, result.first_divergence) == (1.0, None)


@pytest.fixture(scope="module")
def exec_trace_path(tiny_checkpoint, tmp_path_factory):
    """A real (CPU, wall-clock) run of the tiny Llama: greedy, EOS allowed, chunked prefill."""
    folder, _ = tiny_checkpoint("llama")
    engine = Engine(folder, max_total_tokens=512, chunked_prefill_size=16, page_size=4)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 256, size=int(n)).tolist() for n in rng.integers(4, 40, size=6)]
    engine.generate(prompts, {"max_new_tokens": 12, "temperature": 0})
    path = tmp_path_factory.mktemp("replay") / "exec.jsonl"
    engine.trace.save(path)
    return path


def test_an_exec_trace_needs_a_cost_model(exec_trace_path):
    """An exec trace's executor names a device, not a catalogue entry: replay says to pass a
    cost model; with one fitted to the trace, the real run's schedule replays 100%."""
    with pytest.raises(ValueError, match="pass a cost model"):
        replay(exec_trace_path)
    trace = Trace.load(exec_trace_path)
    result = replay(trace, cost_model=CalibratedCostModel.fit(trace.steps))
    assert (result.agree_fraction, result.first_divergence) == (1.0, None)
    assert np.isfinite(result.mape) and (result.steps.measured > 0).all()


def test_replay_rejects_an_empty_trace(sim_trace_path):
    """A trace with no steps has nothing to replay."""
    trace = Trace.load(sim_trace_path)
    with pytest.raises(ValueError, match="no steps"):
        replay(Trace(trace.engine_config, trace.model_info, trace.model_config, trace.executor))


def test_cli_prints_agreement_and_error_and_draws_the_plot(sim_trace_path, tmp_path, capsys):
    """`batchtwin replay TRACE` prints the agreement and MAPE lines and writes a PNG plot
    (and, with --steps-csv, the per-step table)."""
    png, csv = tmp_path / "replay.png", tmp_path / "steps.csv"
    assert main(["replay", str(sim_trace_path), "--plot", str(png), "--steps-csv", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "100.00% of steps re-scheduled identically" in out and "MAPE 0.00%" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(csv.read_text().splitlines()[0].split(",")[:3]) == ["step", "measured", "predicted"]


def test_cli_on_an_exec_trace(exec_trace_path, capsys):
    """Without a cost model the CLI fails in one line; --fit and --hardware both work;
    --json prints the summary."""
    assert main(["replay", str(exec_trace_path), "--no-plot"]) == 1
    assert "pass a cost model" in capsys.readouterr().err
    assert main(["replay", str(exec_trace_path), "--fit", "--no-plot", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["agree_fraction"] == 1.0 and summary["executor"]["kind"] == "exec"
    assert main(["replay", str(exec_trace_path), "--hardware", "h100", "--no-plot"]) == 0
    assert "kernel(" in capsys.readouterr().out   # the default cost model
    assert main(["replay", str(exec_trace_path), "--hardware", "h100", "--cost-model",
                 "roofline", "--no-plot"]) == 0
    assert "roofline(" in capsys.readouterr().out


@pytest.mark.parametrize("cost_model", ["roofline", "kernel"])
def test_a_sim_trace_replays_by_default_on_the_cost_model_it_ran_with(cost_model, tmp_path):
    """Replay's default cost model is the one the header names, rebuilt on the header's
    model, chip and engine profile: it prices every recorded step exactly (MAPE ~0), and
    naming the other model prices them differently."""
    workload = Synthetic(12, 64, 16).build(vocab_size=32000, seed=1, rate=50.0)
    result = simulate(workload, model="llama-3-8b", hardware="h100", cost_model=cost_model,
                      engine_profile="vllm", keep_trace=True)
    path = tmp_path / "run.jsonl"
    result.trace.save(path)
    trace = Trace.load(path)
    rebuilt, recorded = default_cost_model(trace).describe(), trace.executor["cost_model"]
    assert rebuilt.split(",")[1:] == recorded.split(",")[1:]   # NOTE: the header keeps no model key
    assert rebuilt.startswith(f"{cost_model}(")
    assert replay(trace).mape < 1e-12   # NOTE: durations are recorded as end - start
    other = "kernel" if cost_model == "roofline" else "roofline"
    assert replay(trace, default_cost_model(trace, other)).mape > 1e-3


def test_cli_strict_fails_on_divergence(sim_trace_path, tmp_path):
    """--strict exits 3 when some step diverges."""
    trace = Trace.load(sim_trace_path)
    trace.engine_config = dataclasses.replace(trace.engine_config, chunked_prefill_size=32)
    path = tmp_path / "tampered.jsonl"
    trace.save(path)
    assert main(["replay", str(path), "--no-plot", "--strict"]) == 3
