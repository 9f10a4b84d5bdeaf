"""`batchtwin simulate`: files written, the summary table, and one-line errors."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from experiments.main import main

SMALL = ["simulate", "--model", "smollm2-135m", "--num-requests", "8", "--rate", "50",
         "--prompt-len", "32", "--output-len", "8", "--no-progress"]


def test_simulate_writes_requests_steps_config_and_summary(tmp_path, capsys):
    """--out gets requests/steps tables, config.json (effective engine config) and the summary."""
    out = tmp_path / "run"
    assert main([*SMALL, "--out", str(out), "--save-trace", "--max-running-requests", "4"]) == 0
    printed = capsys.readouterr().out
    assert "ttft" in printed and "completed 8" in printed
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "summary.json", "trace.jsonl"} <= files
    ext = "parquet" if "requests.parquet" in files else "csv"
    reader = pd.read_parquet if ext == "parquet" else pd.read_csv
    assert len(reader(out / f"requests.{ext}")) == 8
    assert len(reader(out / f"steps.{ext}")) > 0
    config = json.loads((out / "config.json").read_text())
    assert config["engine_config"]["max_running_requests"] == 4
    assert config["executor"]["kind"] == "sim"
    assert config["workload"]["config"]["seed"] == 0
    assert json.loads((out / "summary.json").read_text())["completed"] == 8


@pytest.mark.parametrize("workload", ["synthetic", "shared-prefix"])
def test_simulate_runs_each_workload_kind(workload, capsys):
    """Every --workload choice runs to completion."""
    assert main([*SMALL, "--workload", workload, "--num-groups", "2",
                 "--system-prompt-len", "64"]) == 0
    assert "completed 8" in capsys.readouterr().out


def test_simulate_reads_a_workload_file(tmp_path, capsys):
    """--workload-file runs a saved workload."""
    from shared import Synthetic

    path = tmp_path / "w.jsonl"
    Synthetic(3, 16, 4).build(vocab_size=100, seed=2).to_jsonl(path)
    assert main([*SMALL, "--workload-file", str(path)]) == 0
    assert "completed 3" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "match"), [
    (["--model", "gpt-9"], "known keys: "),
    (["--hardware", "tpu9"], "known keys: "),
    (["--max-total-tokens", "1"], "max_total_tokens"),
    (["--dp-size", "2", "--enable-dp-attention"], "does not divide tp=1"),
    (["--tp", "3", "--dp-size", "3", "--enable-dp-attention", "--cost-model", "roofline"],
     "kernel cost model only"),
])
def test_bad_input_is_one_line_on_stderr(args, match, capsys):
    """Unknown keys and bad values exit 1 with a one-line message, no traceback."""
    assert main([*SMALL, *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchtwin simulate: ") and match in err
    assert "\n" not in err and "Traceback" not in err


def test_simulate_dp_runs_replicas_behind_a_router(tmp_path, capsys):
    """--dp 2 without attention DP: two replicas; the tables gain a replica column, the
    replicas table and one trace per replica are written."""
    out = tmp_path / "fleet"
    assert main([*SMALL, "--dp", "2", "--router", "least_load", "--out", str(out),
                 "--save-trace"]) == 0
    assert "2 replicas behind least_load" in capsys.readouterr().out
    requests = pd.read_csv(out / "requests.csv")
    assert len(requests) == 8 and set(requests["replica"]) <= {0, 1}
    assert len(pd.read_csv(out / "replicas.csv")) == 2
    assert json.loads((out / "summary.json").read_text())["replicas"] == 2
    assert json.loads((out / "config.json").read_text())["router"] == "least_load"
    assert (out / "trace-0.jsonl").exists() and (out / "trace-1.jsonl").exists()


def test_simulate_runs_attention_dp_on_the_kernel_cost_model(capsys):
    """--tp 2 --dp-size 2 --enable-dp-attention --cost-model kernel runs and says so."""
    args = [*SMALL, "--model", "llama-3-8b", "--tp", "2", "--dp-size", "2",
            "--enable-dp-attention", "--cost-model", "kernel"]
    assert main(args) == 0
    assert "dp_attention=2" in capsys.readouterr().out


def test_the_command_line_loads_without_torch_or_matplotlib():
    """Building the parsers (`batchtwin simulate`, `plan`, --help) imports neither torch nor
    matplotlib: only calibrate, fidelity, generate and explain (without --sim-only) load
    them, when they run."""
    code = ("import sys; from experiments.main import build_parser; build_parser(); "
            "print(','.join(m for m in ('torch', 'matplotlib', 'exec') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == ""


def test_simulate_holds_every_gap_of_a_request_to_its_per_token_slo(tmp_path, capsys):
    """--slo-max-itl S: a request meets the SLO only if every gap between its tokens is
    within S; the summary gives goodput and the attainment, the config the objective."""
    out = tmp_path / "run"
    assert main([*SMALL, "--out", str(out), "--slo-max-itl", "0.002"]) == 0
    assert "meet the SLO" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    requests = pd.read_csv(out / "requests.csv")
    done = requests[requests["output_len"] > 1]
    assert 0 < summary["slo_attainment"] < 1
    assert summary["slo_attainment"] == pytest.approx((done["max_itl"] <= 0.002).mean())
    assert json.loads((out / "config.json").read_text())["slo"]["max_itl"] == 0.002
