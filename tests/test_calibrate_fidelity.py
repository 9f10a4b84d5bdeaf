"""`batchtwin calibrate` and `batchtwin fidelity` on a tiny random model (fast, CPU)."""

from __future__ import annotations

import json

import pytest

from experiments.calibration import calibrate_cmd
from experiments.calibration.grid import ShapeGrid, scenarios
from experiments.calibration.run import CalibrationConfig, calibrate
from experiments.main import main
from experiments.tiny_checkpoint import TinyModelConfig, write_tiny_checkpoint
from sim.cost.calibrated import CalibratedCostModel
from sim.hardware.cluster_network import DEFAULT_NETWORK
from sim.hardware.lookup import get_hardware

SMALL = ShapeGrid(prefill_lens=(16, 96), prefix_lens=(64,), extend_len=16,
                  decode=((1, 16), (4, 32), (8, 16)), decode_steps=4, ragged=((8, 40),),
                  mixed_batch_sizes=(2,),
                  mixed_prompt_len=96)
HELD = ShapeGrid(prefill_lens=(48,), prefix_lens=(32,), extend_len=8, decode=((2, 24),),
                 decode_steps=3, ragged=(), mixed_batch_sizes=(3,), mixed_prompt_len=64)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = TinyModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=1024)
    return str(write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), cfg))


@pytest.fixture(scope="module")
def calibrated(tiny, tmp_path_factory):
    c = CalibrationConfig(model=tiny, dtype="float32", threads=1, repeats=1, chunk_size=32,
                          max_total_tokens=4096, online_requests=6, online_rate=50.0,
                          online_prompt_median=24, online_output_median=6,
                          train_grid=SMALL, held_out_grid=HELD)
    out = tmp_path_factory.mktemp("calibration")
    result = calibrate(c, progress=lambda _: None)
    calibrate_cmd.write(result, c, out)
    return result, out


def test_grid_scenarios_have_unique_request_ids_and_the_planned_shapes():
    """Every scenario's requests are named uniquely; the prefix scenario reuses its prompt."""
    scs = scenarios(SMALL, vocab_size=256, chunk_size=32, tag="t-")
    rids = [r.rid for sc in scs for w in sc.workloads for r in w]
    assert len(rids) == len(set(rids))
    prefix = next(sc for sc in scs if sc.name.startswith("prefix"))
    first, second = (w.requests[0].input_ids for w in prefix.workloads)
    assert second[:len(first)] == first and len(second) == len(first) + SMALL.extend_len


def test_calibration_measures_every_split_and_writes_loadable_files(calibrated):
    """Steps of both grids are measured and priced; the cost model and the this-machine
    hardware entry load back; the re-priced online trace re-schedules identically."""
    result, out = calibrated
    assert set(result.steps["split"]) == {"train", "held_out"}
    assert {"EXTEND", "DECODE", "MIXED"} <= set(result.steps["forward_mode"])
    assert (result.steps["measured_s"] > 0).all() and (result.steps["predicted_s"] > 0).all()
    loaded = CalibratedCostModel.load(out / "cost_model.json")
    assert loaded.coefficients == result.cost_model.coefficients
    hw = get_hardware(str(out / "hardware.json"))
    assert hw.key == "this-machine" and hw.mem_bw == result.rates.mem_bw
    assert hw.kernels is None and hw.network == DEFAULT_NETWORK   # roofline-only
    assert result.replay.agree_fraction == 1.0
    figures = json.loads((out / "calibration.json").read_text())["figures"]
    assert figures["steps_measured"] == len(result.steps)


def test_fidelity_reports_every_figure_with_its_bar(calibrated, tiny, tmp_path):
    """A one-run fidelity check writes the report, per-run figures and both plots; the real
    trace re-schedules identically under teacher forcing."""
    _, cal = calibrated
    out = tmp_path / "fid"
    code = main(["fidelity", "--model", tiny, "--cost-model", str(cal / "cost_model.json"),
                 "--dtype", "float32", "--threads", "1", "--runs", "1", "--num-requests", "6",
                 "--rate", "50", "--prompt-median", "24", "--output-median", "6",
                 "--max-total-tokens", "4096", "--out", str(out)])
    assert code == 0
    data = json.loads((out / "fidelity.json").read_text())
    assert data["medians"]["teacher_forced_agree_fraction"] == 1.0
    for key in ("teacher_forced_median_ape", "teacher_forced_mape", "ttft_p90_error", "e2e_p50_error"):
        assert data["medians"][key] >= 0
    report = (out / "report.md").read_text()
    assert "| teacher_forced_mape |" in report and "<= 0.10" in report
    assert (out / "step_times.png").stat().st_size > 0 and (out / "latencies.png").stat().st_size > 0


@pytest.mark.parametrize("argv,message", [
    (["--cost-model", "/nonexistent/cost.json"], "does not exist"),
    (["--rate", "0"], "--rate: must be > 0"),
    (["--runs", "0"], "must be >= 1"),
    (["--temperature", "-1"], "--temperature: must be >= 0"),
])
def test_fidelity_bad_input_is_one_clear_line(argv, message, capsys):
    """Bad options exit 2 with a message naming the problem, before any model loads."""
    assert main(["fidelity", *argv]) == 2
    assert message in capsys.readouterr().err


def test_calibrate_bad_input_is_one_clear_line(capsys):
    """calibrate refuses a non-positive thread count and a negative temperature, exit 2."""
    assert main(["calibrate", "--threads", "0"]) == 2
    assert main(["calibrate", "--temperature", "-0.5"]) == 2
    assert "--temperature: must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(("fast", "expected"), [(True, "bfloat16"), (False, "float32")])
def test_auto_dtype_is_float32_on_a_cpu_without_fast_bfloat16(fast, expected, monkeypatch):
    """calibrate and fidelity default to --dtype auto: bfloat16 where the CPU has fast
    bfloat16 kernels, else float32 (bfloat16 would run several times slower); a dtype given
    is kept."""
    import torch

    import exec.layers.packed_linear
    from experiments.calibration.run import resolve_dtype

    monkeypatch.setattr(exec.layers.packed_linear, "cpu_has_fast_kernels", lambda dtype: fast)
    assert resolve_dtype("auto", torch.device("cpu")) == expected
    assert resolve_dtype("bfloat16", torch.device("cpu")) == "bfloat16"
    from experiments.main import build_parser

    assert build_parser().parse_args(["calibrate"]).dtype == "auto"


def test_fidelity_can_recalibrate_before_every_run(tiny):
    """With a calibration per run on the same engine, each run gets its own fitted model and
    the real trace still re-schedules identically; the engine is left reset and leak-free."""
    import dataclasses

    from experiments.calibration.fidelity import FIDELITY_TRAFFIC, FidelityWorkload, run_fidelity
    from experiments.calibration.run import calibrate_engine, calibration_engine

    c = CalibrationConfig(model=tiny, dtype="float32", threads=1, repeats=1, chunk_size=32,
                          max_total_tokens=4096, online_requests=0, train_grid=SMALL,
                          held_out_grid=HELD)
    engine = calibration_engine(c, tiny)
    fitted = []

    def cost_for_run(k):
        fitted.append(calibrate_engine(engine, c, tiny, progress=lambda _: None).cost_model)
        return fitted[-1]

    traffic = dataclasses.replace(FIDELITY_TRAFFIC, num_requests=5, prompt_median=24,
                                  output_median=6)
    spec = FidelityWorkload(traffic, rate=50.0)
    runs = run_fidelity(engine, cost_for_run, spec, runs=2, progress=lambda _: None)
    assert len(fitted) == 2 and all(r.errors["teacher_forced_agree_fraction"] == 1.0 for r in runs)
    assert len(runs[0].real.requests) == 5
    engine.scheduler.mem.check_idle()


def test_missing_default_model_falls_back_to_a_tiny_random_model(tmp_path, monkeypatch, capsys):
    """Without SmolLM2 installed, calibrate and fidelity use a tiny random checkpoint and say so."""
    import exec.loading.model_files as model_files
    from experiments.calibration.run import resolve_model

    def missing():
        raise model_files.ModelNotFoundError("the default model is not installed")

    monkeypatch.setattr(model_files, "default_model_path", missing)
    path = resolve_model(None, tmp_path)
    assert (tmp_path / "tiny-model" / "config.json").is_file() and path == str(tmp_path / "tiny-model")
    assert "tiny random model" in capsys.readouterr().out
    assert resolve_model("given/path", tmp_path) == "given/path"
