"""`batchtwin plan`: a reduced plan writes its report and plots; the rate search, SLO parsing
and grid; bad input and impossible SLOs give one-line messages."""

import json
import math

import pandas as pd
import pytest

from experiments.main import main
from experiments.plan.grid import Grid, parse_list
from experiments.plan.plan_cmd import EXIT_INFEASIBLE
from experiments.plan.point import PlanSpec, WorkloadSpec
from experiments.plan.report import SECTIONS, band_columns, rate_band
from experiments.plan.search import RateSearch
from experiments.plan.slo import SLOTargets
from sim.cost.model_error import MIN_KIND_ROWS, MODEL_ERRORS, NO_BAND, error_band

SMALL = ["plan", "--model", "smollm2-135m", "--workload", "synthetic", "--prompt-len", "64",
         "--output-len", "16", "--num-requests", "40", "--seeds", "1", "--rate-tolerance", "0.2",
         "--chunked-prefill-size", "512", "--max-running-requests", "8,auto", "--jobs", "1",
         "--no-progress"]
DEFAULT_BAND = error_band(None, "online dense").describe()   # smollm2: a dense model
PLOTS = ("latency_vs_rate.png", "goodput_vs_rate.png", "kv_usage.png", "batch_composition.png")


def test_reduced_plan_writes_report_sections_plots_csv_and_config(tmp_path, capsys):
    """A small plan exits 0 and writes report.md (four sections), the PNGs, runs/sweep CSVs
    and config.json."""
    out = tmp_path / "plan"
    assert main([*SMALL, "--slo", "ttft_p90=50ms,tpot_p90=4ms", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "best: " in printed and DEFAULT_BAND in printed
    report = (out / "report.md").read_text()
    assert DEFAULT_BAND in report
    for section in SECTIONS:
        assert f"\n## {section}\n" in report
    for png in PLOTS:
        assert (out / png).stat().st_size > 0 and f"]({png})" in report
    runs = pd.read_csv(out / "runs.csv")
    assert {"probe", "search", "curve"} <= set(runs["phase"])
    sweep = pd.read_csv(out / "sweep.csv")
    assert len(sweep) == 2 and (sweep["rate_low"] < sweep["max_rate"]).all()
    assert (sweep["rate_high"] > sweep["max_rate"]).all()
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == "smollm2-135m" and config["best_engine_config"]["page_size"] == 1


def test_the_roofline_cost_model_plans_with_its_own_error_band(tmp_path, capsys):
    """--cost-model roofline: the max rate is printed and reported with the roofline's
    measured median |error| (on the published runs most like the plan), and the simulate
    command names the model."""
    out = tmp_path / "plan"
    args = [*SMALL, "--max-running-requests", "auto", "--cost-model", "roofline"]
    assert main([*args, "--slo", "ttft_p90=100ms,tpot_p90=10ms", "--out", str(out)]) == 0
    band = error_band("roofline", "online dense").describe()
    assert band in capsys.readouterr().out and band in (out / "report.md").read_text()
    assert "--cost-model roofline" in (out / "report.md").read_text()


def test_a_plans_band_is_its_kind_of_runs_where_enough_were_measured():
    """error_band(model, kind) is the band of that kind's published rows (MIN_KIND_ROWS or
    more), else its family's (dense, MoE), else every row's; a plan of an MoE model reads
    the MoE rows."""
    kernel = MODEL_ERRORS["kernel"]
    measured = {kind: (error, rows) for kind, error, _, rows in kernel.kinds}
    for kind, (error, rows) in measured.items():
        band = error_band("kernel", kind)
        family = kind.split(" ")[-1]
        if rows < MIN_KIND_ROWS:   # NOTE: the family's rows stand in
            kind, (error, rows) = family, measured[family]
        assert (band.median_abs_error_pct, band.rows_compared, band.kind) == (error, rows, kind)
        assert f"published {kind} runs" in band.describe()
    assert error_band("kernel", "no such kind") == kernel
    moe = PlanSpec("mixtral-8x7b", WorkloadSpec(), SLOTargets.parse("ttft_p90=1s"))
    assert rate_band(moe, 10.0).endswith(f"{error_band(None, 'online MoE').describe()})")


def test_a_cost_model_without_a_measured_error_says_so():
    """A calibrated file has no band: the rate comes with NO_BAND, the CSV band is empty."""
    spec = PlanSpec("smollm2-135m", WorkloadSpec(), SLOTargets.parse("ttft_p90=1s"),
                    cost_model="fitted.json")
    assert rate_band(spec, 12.4) == f"12.4 req/s ({NO_BAND})"
    assert band_columns(error_band("fitted.json"), 12.4) == {"rate_low": None, "rate_high": None}
    e = error_band("kernel").median_abs_error_pct / 100
    assert error_band("kernel").band(10.0) == pytest.approx((10.0 * (1 - e), 10.0 * (1 + e)))


def test_impossible_slo_exits_nonzero_with_one_line_and_a_report(tmp_path, capsys):
    """An SLO no rate can meet: exit 3, one line on stderr, and a report saying so."""
    out = tmp_path / "plan"
    assert main([*SMALL, "--slo", "tpot_p90=1us", "--out", str(out)]) == EXIT_INFEASIBLE
    err = [ln for ln in capsys.readouterr().err.splitlines() if "wrote" not in ln]
    assert len(err) == 1 and err[0].startswith("batchtwin plan: no configuration meets")
    assert "**No configuration meets the SLOs**" in (out / "report.md").read_text()


@pytest.mark.parametrize(("args", "match"), [
    (["--model", "gpt-9"], "known keys: "),
    (["--hardware", "h100,tpu9"], "unknown hardware 'tpu9'"),
    (["--schedule-policy", "fcfs,nope"], "unknown policy 'nope'"),
    (["--tp", "2"], "does not divide"),
    (["--max-running-requests", "many"], "--max-running-requests: bad value 'many'"),
    (["--slo", "ttft=2s"], "names no statistic"),
    (["--slo", "ttft_p95=2s"], "unknown statistic 'p95'"),
    (["--slo", "foo_p90=2s"], "unknown metric 'foo'"),
    (["--slo", "ttft_p90=2x"], "bad value '2x'"),
    (["--slo", "ttft_p90=0ms"], "can never be met"),
    (["--slo", "ttft_p90"], "expected NAME=VALUE"),
    (["--prompt-len", "9000"], "context length"),
])
def test_bad_input_is_one_line_on_stderr(args, match, tmp_path, capsys):
    """Unknown names and malformed values exit 1 with a one-line message, no traceback."""
    assert main([*SMALL, "--out", str(tmp_path / "plan"), *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchtwin plan: ") and match in err
    assert "\n" not in err and "Traceback" not in err


def _search(threshold: float, saturation: float = 100.0, capacity: float = math.inf,
            tried: list[float] | None = None) -> RateSearch:
    """Run a RateSearch against an oracle passing exactly the rates <= threshold, whose
    runs above `capacity` are saturated misses that served `capacity` req/s."""
    s = RateSearch(saturation, tolerance=0.05, min_fraction=1 / 16)
    while (step := s.next_point()) is not None:
        rate, phase = step
        (tried if tried is not None else []).append(rate)
        s.record(rate, phase, rate <= threshold, capacity if rate > capacity else math.inf)
    return s


@pytest.mark.parametrize("threshold", [7.0, 33.3, 49.9, 50.1, 99.0])
def test_rate_search_brackets_the_threshold_within_tolerance(threshold):
    """The highest passing rate is at most the threshold and within 5% of the lowest failing."""
    s = _search(threshold)
    assert s.passed is not None and s.failed is not None
    assert s.passed <= threshold < s.failed <= s.passed * 1.05


@pytest.mark.parametrize(("threshold", "capacity", "fewer"),
                         [(36.0, 40.0, True), (39.9, 40.0, True), (20.0, 40.0, False)])
def test_rate_search_below_a_saturated_miss_tries_under_its_throughput(threshold, capacity, fewer):
    """A miss whose queue grew caps the search at the throughput it served: the search still
    brackets the threshold within 5% (the ceiling standing for the failing end), starting
    just under the ceiling and galloping down, in fewer runs than halving from the probe's
    saturation rate takes when the threshold is near the capacity, and never more."""
    tried: list[float] = []
    s = _search(threshold, capacity=capacity, tried=tried)
    assert s.passed is not None and s.passed <= threshold < s.upper <= s.passed * 1.05
    assert tried[2] == pytest.approx(capacity / 1.05)   # probe rate, floor, then the ceiling
    plain: list[float] = []
    _search(threshold, tried=plain)
    assert len(tried) < len(plain) if fewer else len(tried) <= len(plain)


def test_rate_search_stops_at_saturation_when_it_passes():
    """A configuration meeting the SLOs at its saturation throughput is capped there."""
    s = _search(math.inf)
    assert (s.passed, s.failed) == (100.0, None)


def test_rate_search_gives_up_when_the_floor_run_misses():
    """Missing at saturation and at the floor rate ends the search with nothing passing."""
    s = _search(1.0)
    assert s.passed is None and s.floor is False and s.next_point() is None


class _OraclePool:
    """A PointPool whose runs pass exactly the rates <= a per-seed threshold."""

    jobs = 1

    def __init__(self, thresholds: dict[int, float]) -> None:
        self.thresholds, self.points = thresholds, []

    def run(self, points, bar):
        self.points += points
        return [_oracle_result(p, self.thresholds[p.seed]) for p in points]

    def stream(self, points, follow, bar):
        todo = list(points)
        while todo:
            todo += follow(self.run([todo.pop(0)], bar)[0])


def _oracle_result(point, threshold: float):
    from experiments.plan.point import PointResult

    metrics = {"saturation": 100.0, "num_requests": 1000.0, "goodput": 0.0, "busy": 0.5,
               "num_retractions": 0.0, "kv_blocked": 0.0, "cap_blocked": 0.0,
               "decode_batch_mean": 8.0, "queue_max": 0.0, "queue_mean": 0.0}
    miss = point.phase != "probe" and point.rate > threshold
    return PointResult(point, metrics, ("tpot_p90 over",) if miss else (),
                       ("tpot_p90",) if miss else ())


@pytest.mark.parametrize(("thresholds", "answer", "second_runs"),
                         [({0: 40.0, 1: 40.0}, 40.0, 1), ({0: 40.0, 1: 30.0}, 30.0, None)])
def test_other_seeds_run_only_at_the_rate_the_search_ends_on(thresholds, answer, second_runs):
    """The search runs on the first seed; the second seed runs where it ends (once, when
    the seeds agree), and a miss there sends the search below it on every seed: the answer
    passes every seed and is within 5% under the lowest seed's threshold."""
    from tqdm import tqdm

    from experiments.plan.grid import Candidate
    from experiments.plan.search import search_rates

    spec = PlanSpec("smollm2-135m", WorkloadSpec(), SLOTargets.parse("tpot_p90=1s"), seeds=(0, 1))
    pool = _OraclePool(thresholds)
    with tqdm(disable=True) as bar:
        (outcome,), _ = search_rates(spec, [Candidate("h100", 1, None, None, 1, "fcfs")], pool, bar)
    assert answer / 1.05 <= outcome.rate <= answer
    assert {r.point.seed for r in outcome.at_rate} == {0, 1}
    second = [p.rate for p in pool.points if p.seed == 1]
    assert outcome.rate in second and len(second) == (second_runs or len(second))


def test_a_pool_with_more_workers_than_configurations_runs_every_seed_at_every_rate():
    """One configuration on two workers: each search rate runs on both seeds at once."""
    from tqdm import tqdm

    from experiments.plan.grid import Candidate
    from experiments.plan.search import search_rates

    spec = PlanSpec("smollm2-135m", WorkloadSpec(), SLOTargets.parse("tpot_p90=1s"), seeds=(0, 1))
    pool = _OraclePool({0: 40.0, 1: 40.0})
    pool.jobs = 2
    with tqdm(disable=True) as bar:
        search_rates(spec, [Candidate("h100", 1, None, None, 1, "fcfs")], pool, bar)
    searched = [(p.rate, p.seed) for p in pool.points if p.phase == "search"]
    first = [r for r, seed in searched if seed == 0]
    assert len(first) > 2 and sorted(r for r, seed in searched if seed == 1) == sorted(first)


def test_slo_parses_units_and_reports_violations():
    """Units s/ms/us convert to seconds; a statistic above its limit (or NaN) is a violation."""
    slo = SLOTargets.parse("ttft_p90=2s, tpot_p90=100ms,e2e_mean=1500us")
    assert [o.limit for o in slo.objectives] == pytest.approx([2.0, 0.1, 0.0015])
    missed = slo.violations({"ttft_p90": 2.5, "tpot_p90": 0.05, "e2e_mean": math.nan})
    assert [v.objective.key for v in missed] == ["ttft_p90", "e2e_mean"]
    assert slo.per_request().tpot == pytest.approx(0.1)


def test_grid_expands_every_combination_with_auto_and_off():
    """Comma lists become every combination; `auto`/`off` mean None (engine default/no chunking)."""
    chunks = parse_list("2048,off,2048", "--chunked-prefill-size", int, "off")
    assert chunks == (2048, None)
    grid = Grid(hardware=("h100", "h200"), tp=(1, 2), chunked_prefill_size=chunks,
                max_running_requests=(None,))
    candidates = grid.candidates()
    assert len(candidates) == 8 and len(set(candidates)) == 8
    assert candidates[1].engine_args()["chunked_prefill_size"] is None


def test_process_pool_returns_the_serial_results_in_order():
    """Two worker processes give the same results, in submission order, as a serial run."""
    from tqdm import tqdm

    from experiments.plan.grid import Candidate
    from experiments.plan.point import PlanSpec, Point, WorkloadSpec
    from experiments.plan.pool import PointPool

    spec = PlanSpec("smollm2-135m", WorkloadSpec("synthetic", 12, 32, 4),
                    SLOTargets.parse("ttft_p90=1s"), seeds=(0,))
    c = Candidate("h100", 1, 512, None, 1, "fcfs")
    points = [Point(c, rate, 0, "search") for rate in (400.0, 50.0, 100.0)]
    with tqdm(disable=True) as bar:
        with PointPool(spec, 1) as pool:
            serial = pool.run(points, bar)
        with PointPool(spec, 2) as pool:
            parallel = pool.run(points, bar)
    assert [r.point for r in parallel] == points
    assert [r.metrics for r in parallel] == [r.metrics for r in serial]


def test_a_streamed_pool_runs_each_follow_up_and_matches_the_serial_results():
    """`stream` runs the points a result asks for as it comes back, until none is left: two
    workers make the same runs with the same results as one."""
    from tqdm import tqdm

    from experiments.plan.grid import Candidate
    from experiments.plan.point import PlanSpec, Point, WorkloadSpec
    from experiments.plan.pool import PointPool

    spec = PlanSpec("smollm2-135m", WorkloadSpec("synthetic", 12, 32, 4),
                    SLOTargets.parse("ttft_p90=1s"), seeds=(0,))
    c = Candidate("h100", 1, 512, None, 1, "fcfs")
    made = {1: [], 2: []}
    for jobs in made:
        def follow(result, jobs=jobs):
            made[jobs].append(result)
            rate = result.point.rate
            return [Point(c, rate / 2, 0, "search")] if rate > 60 else []

        with tqdm(disable=True) as bar, PointPool(spec, jobs) as pool:
            pool.stream([Point(c, r, 0, "search") for r in (400.0, 50.0)], follow, bar)
    assert sorted(r.point.rate for r in made[1]) == [50.0, 50.0, 100.0, 200.0, 400.0]
    by_rate = {jobs: sorted((r.point.rate, sorted(r.metrics.items())) for r in runs)
               for jobs, runs in made.items()}
    assert by_rate[1] == by_rate[2]


def test_plan_into_a_folder_with_a_report_exits_1_naming_overwrite(tmp_path, capsys):
    """A folder holding an earlier report is refused before any run (exit 1, naming
    --overwrite); with --overwrite the plan replaces it, stale plots of the earlier one gone."""
    out = tmp_path / "plan"
    out.mkdir()
    (out / "report.md").write_text("an earlier plan\n")
    (out / "pareto.png").write_bytes(b"stale")
    args = [*SMALL, "--max-running-requests", "auto", "--slo", "ttft_p90=1s", "--out", str(out)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "--overwrite" in err and "\n" not in err.strip()
    assert (out / "report.md").read_text() == "an earlier plan\n"
    assert main([*args, "--overwrite"]) == 0
    assert (out / "report.md").read_text().startswith("# batchtwin plan")
    assert (out / "pareto.png").read_bytes() != b"stale"


def test_a_per_token_gap_objective_holds_each_requests_largest_gap():
    """max_itl_p90=50ms: 90% of the requests keep every gap between tokens within 50 ms (the
    summary's max_itl_p90), and for goodput each request's largest gap is held to 50 ms."""
    slo = SLOTargets.parse("ttft_p90=2s,max_itl_p90=50ms")
    assert slo.limits() == {"ttft_p90": 2.0, "max_itl_p90": 0.05}
    assert slo.per_request().max_itl == 0.05
    missed = slo.violations({"ttft_p90": 1.0, "max_itl_p90": 0.06})
    assert [v.objective.key for v in missed] == ["max_itl_p90"]
    assert not slo.violations({"ttft_p90": 1.0, "max_itl_p90": 0.05})
