"""`batchtwin plan` over fleet layouts: --dp replicas, --target-rate's fewest GPUs and their
cost, the Pareto plot, and the Ray backend giving the process pool's sweep."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.main import main

SMALL = ["plan", "--model", "smollm2-135m", "--workload", "synthetic", "--prompt-len", "64",
         "--output-len", "16", "--num-requests", "40", "--seeds", "1", "--rate-tolerance", "0.2",
         "--chunked-prefill-size", "512", "--max-running-requests", "auto", "--jobs", "1",
         "--slo", "ttft_p90=50ms,tpot_p90=4ms", "--no-progress"]


def _plan(tmp_path, name: str, *extra: str) -> tuple[int, pd.DataFrame]:
    out = tmp_path / name
    code = main([*SMALL, "--out", str(out), *extra])
    return code, pd.read_csv(out / "sweep.csv")


def test_target_rate_takes_the_fewest_gpus_that_serve_it_and_prices_a_million_tokens(
        tmp_path, capsys):
    """A target above one replica's max rate needs two; the cost is GPUs x price / (rate x
    output tokens per request x 3600 / 1e6), by hand from the chosen layout's runs."""
    _, one = _plan(tmp_path, "one", "--dp", "1")
    target = 1.3 * float(one["max_rate"].iloc[0])
    capsys.readouterr()
    code, sweep = _plan(tmp_path, "fleet", "--dp", "1,2,4", "--target-rate", f"{target:.6g}",
                        "--gpu-hour-price", "2.5")
    printed = capsys.readouterr().out
    assert code == 0
    serving = sweep[sweep["feasible"] & (sweep["max_rate"] >= float(f"{target:.6g}"))]
    fewest = int(serving["num_gpus"].min())
    assert fewest == 2 and f"on {fewest} GPUs" in printed
    runs = pd.read_csv(tmp_path / "fleet" / "runs.csv")
    chosen = serving[serving["num_gpus"] == fewest].iloc[0]
    at = runs[(runs["dp"] == 2) & (runs["rate"] == chosen["max_rate"])]
    per_request = (at["output_throughput"] / at["request_throughput"]).mean()
    cost = 2 * 2.5 / (float(f"{target:.6g}") * per_request * 3600 / 1e6)
    assert f"${cost:.3f} (" in printed and "GPU-hours) per million output tokens" in printed
    report = (tmp_path / "fleet" / "report.md").read_text()
    assert "\n## Target rate\n" in report and "](pareto.png)" in report
    assert (tmp_path / "fleet" / "pareto.png").stat().st_size > 0
    assert sweep.loc[sweep["dp"] == 4, "num_gpus"].eq(4).all()


def test_a_target_no_layout_serves_exits_3_and_says_so(tmp_path, capsys):
    code, _ = _plan(tmp_path, "far", "--dp", "1", "--target-rate", "1e6")
    assert code == 3
    assert "no configuration serves it" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "match"), [
    (["--gpu-hour-price", "h100=abc"], "is not a number"),
    (["--gpu-hour-price", "h200=2"], "no price for h100"),
    (["--router", "nearest"], "unknown policy 'nearest'"),
    (["--dp", "0"], "replicas must be >= 1"),
    (["--ray-address", "ray://x:1"], "--ray-address needs --backend ray"),
])
def test_bad_fleet_flags_are_one_line_on_stderr(args, match, tmp_path, capsys):
    assert main([*SMALL, "--out", str(tmp_path / "bad"), *args]) == 1
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err


def test_the_ray_backend_gives_the_process_pools_sweep(tmp_path):
    """A local Ray cluster runs the same points: sweep.csv and runs.csv are identical."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as e:  # NOTE: any failure to start is the machine's, not the backend's
        pytest.skip(f"Ray cannot start on this machine: {e}")
    ray.shutdown()
    _, process = _plan(tmp_path, "process", "--dp", "1,2", "--jobs", "2")
    _, on_ray = _plan(tmp_path, "ray", "--dp", "1,2", "--jobs", "2", "--backend", "ray")
    pd.testing.assert_frame_equal(process, on_ray)
    runs = [pd.read_csv(tmp_path / n / "runs.csv") for n in ("process", "ray")]
    pd.testing.assert_frame_equal(*runs)
    assert not math.isnan(process["max_rate"].iloc[0])


def test_plan_sweeps_prefill_decode_ratios(tmp_path):
    """--disaggregate off,1P1D,1P2D: one row per layout, GPUs = (x + y) x tp, and a P:D layout
    reproduces with `simulate --disaggregate`."""
    code, sweep = _plan(tmp_path, "pd", "--disaggregate", "off,1P1D,1P2D")
    assert code == 0
    gpus = dict(zip(sweep["disaggregate"].fillna("off"), sweep["num_gpus"], strict=True))
    assert gpus == {"off": 1, "1P1D": 2, "1P2D": 3}
    assert sweep["feasible"].all()


def test_a_disaggregated_layout_with_replicas_is_refused(tmp_path, capsys):
    assert main([*SMALL, "--out", str(tmp_path / "x"), "--disaggregate", "1P1D", "--dp", "2"]) == 1
    assert "takes --dp 1" in capsys.readouterr().err


def test_without_ray_the_backend_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    """An import of ray that fails: one line naming the extra."""
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    assert main([*SMALL, "--out", str(tmp_path / "noray"), "--backend", "ray"]) == 1
    assert 'pip install -e ".[ray]"' in capsys.readouterr().err


def test_the_pareto_fronts_points_are_numbered_and_named_in_a_table_not_on_the_plot():
    """Front points carry a number on the plot; the table beside it names each number's
    layout, rate, TPOT and binding limit, one line each, in front order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.plan.pareto import FleetPoint, front_table, pareto_front

    points = [FleetPoint(f"h100 tp{tp} dp{dp} chunk=8192", "compute", 10.0 * dp, tpot, tokens, 1.0)
              for tp, dp, tpot, tokens in ((4, 1, 0.02, 500), (4, 2, 0.03, 600), (8, 2, 0.04, 550),
                                           (8, 4, 0.05, 700))]
    front = pareto_front(points)
    assert [p.label.split(" chunk")[0] for p in front] == ["h100 tp4 dp1", "h100 tp4 dp2",
                                                           "h100 tp8 dp4"]
    fig, ax = plt.subplots()
    front_table(ax, front)
    lines = ax.texts[0].get_text().splitlines()[2:]
    plt.close(fig)
    assert lines == [" 1  h100 tp4 dp1 @ 10/s, 20 ms (compute)",
                     " 2  h100 tp4 dp2 @ 20/s, 30 ms (compute)",
                     " 3  h100 tp8 dp4 @ 40/s, 50 ms (compute)"]
