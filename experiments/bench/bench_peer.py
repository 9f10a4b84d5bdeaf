"""Benchmark: batchtwin side by side with BLIS (inference-sim/inference-sim, a Go serving
simulator) on the same requests, as whole processes.

    python -m experiments.bench.bench_peer --sizes 1000 10000 --rates 20 --rounds 3 \
        --blis-bin ~/blis-work/blis-bin --blis-src ~/blis-work/blis [--json OUT]
    python -m experiments.bench.bench_peer --batchtwin-only ...    # no BLIS binary needed

For each size N and rate R (`inf`: every arrival at t=0) the workload is the one `batchtwin
simulate --workload sharegpt --num-requests N --rate R --seed 0` simulates (the CLI's own
workload flags parse the same flag list, so it is `ShareGPTLike(N).build(vocab_size=128256,
seed=0, rate=R)`); `write_trace_v2` exports it as a BLIS TraceV2 pair (header YAML and the
27-column data CSV that `blis run --trace-output` writes: arrivals in microseconds, prompt and
output token counts). Then, `--rounds` times, alternated A B A B so both see the same host:
(a) `blis replay` with the roofline latency model and `--cache-signal-delay 0` (same results as
the default, 4-7x faster), Llama-3.1-8B on one H100, run in the BLIS source folder (its
model_configs/), `--horizon 1000000000000` for a t=0 trace (replay stops at twice the last
arrival otherwise); (b) `python -m experiments.main simulate --model llama-3-8b --hardware h100`
with those workload flags and the default cost model.

Each child's own CPU seconds (user + sys) and peak RSS come from `os.wait4` on its pid (MB =
2^20 bytes, as /usr/bin/time's kbytes / 1024); this process stays small, since its own peak
RSS is a floor under a child's (`in_own_process`), and prints that floor. The table per size and rate gives their medians
over rounds, the ratio batchtwin / BLIS, and each simulator's TTFT and TPOT medians over
requests (TPOT = (E2E - TTFT) / (output - 1) over requests of 2+ tokens, batchtwin's
definition: batchtwin's from its printed summary, BLIS's from its --results-path JSON). Prints
the CPU model and the exact commands; `--json OUT` writes the per-round numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from experiments.bench.cpu_info import cpu_model

ROOT = Path(__file__).resolve().parents[2]
BLIS_README = "/work/shared/reference/peers/blis/README.md"
BT_MODEL, BLIS_MODEL = "llama-3-8b", "meta-llama/llama-3.1-8b-instruct"
VOCAB_SIZE = 128256   # llama-3-8b's vocabulary: the workload's token ids are drawn below it
T0_HORIZON_US = "1000000000000"
# BLIS TraceV2's data columns, in the order `blis run --trace-output` writes them
TRACE_COLUMNS = (
    "request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
    "prefix_group", "prefix_length", "streaming", "input_tokens", "output_tokens",
    "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio", "model",
    "deadline_us", "server_input_tokens", "arrival_time_us", "send_time_us",
    "first_chunk_time_us", "last_chunk_time_us", "num_chunks", "status", "error_message",
    "finish_reason",
)
TRACE_HEADER = ("trace_version: 3\ntime_unit: microseconds\nmode: generated\n"
                "warm_up_requests: 0\nworkload_seed: 0\n")


@dataclass(frozen=True)
class Round:
    """One child process's numbers."""

    sim: str            # "blis" or "batchtwin"
    size: int
    rate: str           # as passed on the command line ("20", "inf")
    round: int
    cpu_s: float        # user + sys of the child alone
    rss_mb: float       # its peak resident set
    wall_s: float
    completed: int
    ttft_p50_ms: float
    tpot_p50_ms: float


def workload_flags(size: int, rate: float) -> list[str]:
    """The `batchtwin simulate` flags that select the benchmark's workload."""
    return ["--workload", "sharegpt", "--num-requests", str(size), "--rate", f"{rate:g}",
            "--seed", "0"]


def cli_workload(size: int, rate: float):
    """The Workload `batchtwin simulate` builds from `workload_flags(size, rate)`."""
    from experiments.cli.workload_flags import make_workload, workload_arguments

    parser = argparse.ArgumentParser()
    workload_arguments(parser.add_argument_group())
    args = parser.parse_args(workload_flags(size, rate))
    return make_workload(args, VOCAB_SIZE)


def trace_row(index: int, arrival_s: float, prompt: int, output: int) -> list[str]:
    """One TraceV2 data row: request `index` arriving at `arrival_s` (NOTE: sent at arrival,
    no deadline, as `blis run --trace-output` writes an unthrottled request)."""
    us = str(round(arrival_s * 1e6))
    row = dict.fromkeys(TRACE_COLUMNS, "0")
    row.update(request_id=str(index), client_id="bt", tenant_id="", slo_class="",
               session_id="", prefix_group="", streaming="false", input_tokens=str(prompt),
               output_tokens=str(output), text_tokens=str(prompt), model="",
               arrival_time_us=us, send_time_us=us, status="ok", error_message="",
               finish_reason="")
    return [row[c] for c in TRACE_COLUMNS]


def write_trace_v2(workload, prefix: Path) -> tuple[Path, Path]:
    """`prefix`.yaml (header) and `prefix`.csv (one row per request, in arrival order)."""
    header, data = prefix.with_suffix(".yaml"), prefix.with_suffix(".csv")
    header.write_text(TRACE_HEADER)
    lines = [",".join(TRACE_COLUMNS)]
    for i, r in enumerate(workload.requests):
        lines.append(",".join(trace_row(i, r.arrival_time, len(r.input_ids),
                                        r.sampling_params.max_new_tokens)))
    data.write_text("\n".join(lines) + "\n")
    return header, data


def in_own_process(func: str, *args: str):
    """`func(*args)`, a function of this module, run by a process of its own: its result
    (JSON). NOTE: Linux carries a process's peak RSS into a child it starts (the mm's
    high-water mark survives vfork + exec), so this process stays small: it never builds a
    workload, reads BLIS's results or imports numpy, and each child's ru_maxrss is its own."""
    code = (f"import json, sys; from experiments.bench.bench_peer import {func}; "
            f"print(json.dumps({func}(*sys.argv[1:])))")
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def export_trace(size: str, rate: str, prefix: str) -> list[str]:
    """The benchmark's TraceV2 pair for `size` and `rate` (command-line strings): its paths."""
    return [str(p) for p in write_trace_v2(cli_workload(int(size), float(rate)), Path(prefix))]


def blis_command(blis_bin: str, trace: tuple[Path, Path], results: Path, rate: float) -> list[str]:
    cmd = [blis_bin, "replay", "--trace-header", str(trace[0]), "--trace-data", str(trace[1]),
           "--model", BLIS_MODEL, "--hardware", "H100", "--tp", "1",
           "--latency-model", "roofline", "--results-path", str(results),
           "--cache-signal-delay", "0"]
    return cmd + (["--horizon", T0_HORIZON_US] if math.isinf(rate) else [])


def batchtwin_command(size: int, rate: float) -> list[str]:
    return [sys.executable, "-m", "experiments.main", "simulate", "--model", BT_MODEL,
            "--hardware", "h100", *workload_flags(size, rate), "--no-progress"]


def run_measured(cmd: list[str], cwd: Path, log: Path) -> tuple[float, float, float]:
    """(CPU s, peak RSS MB, wall s) of `cmd` run to completion, stdout+stderr to `log`;
    SystemExit with the log's tail when it fails."""
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        # NOTE: wait4 reaps this child alone: its own rusage, not RUSAGE_CHILDREN's maximum
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{log.read_text()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wall


def batchtwin_summary(stdout: str) -> tuple[int, float, float]:
    """(completed, TTFT p50 ms, TPOT p50 ms) from `batchtwin simulate`'s printed summary."""
    p50 = {}
    completed = -1
    for line in stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["completed"]:
            completed = int(parts[1])
        elif len(parts) == 5 and parts[0] in ("ttft", "tpot"):   # name mean p50 p90 p99
            p50[parts[0]] = float(parts[2])
    return completed, p50["ttft"], p50["tpot"]


def blis_summary(results: str) -> tuple[int, float, float]:
    """(completed, TTFT p50 ms, TPOT p50 ms) from BLIS's per-request results JSON."""
    recs = json.loads(Path(results).read_text())
    ttft = [r["ttft_us"] / 1e3 for r in recs]
    tpot = [(r["e2e_us"] - r["ttft_us"]) / 1e3 / (r["output_tokens"] - 1)
            for r in recs if r["output_tokens"] > 1]
    return len(recs), statistics.median(ttft), statistics.median(tpot)


def one_size(args, size: int, rate: float, tmp: Path, commands: dict) -> list[Round]:
    """The alternated rounds of one size and rate (BLIS first in each round)."""
    tag = f"n{size}_r{rate:g}"
    trace = tuple(Path(p) for p in in_own_process("export_trace", str(size), repr(rate),
                                                  str(tmp / tag)))
    results, log = tmp / f"{tag}_blis.json", tmp / f"{tag}.log"
    sides = simulators(args, size, rate, trace, results)
    commands[tag] = {sim: " ".join(cmd) for sim, (cmd, _) in sides.items()}
    rounds = []
    for i in range(args.rounds):
        for sim, (cmd, cwd) in sides.items():
            cpu, rss, wall = run_measured(cmd, cwd, log)
            summary = (in_own_process("blis_summary", str(results)) if sim == "blis"
                       else batchtwin_summary(log.read_text()))
            rounds.append(Round(sim, size, f"{rate:g}", i, cpu, rss, wall, *summary))
    return rounds


def simulators(args, size: int, rate: float, trace: tuple[Path, Path],
               results: Path) -> dict[str, tuple[list[str], Path]]:
    """{simulator: (command, cwd)}, BLIS first (none with --batchtwin-only)."""
    blis = {"blis": (blis_command(args.blis_bin, trace, results, rate), Path(args.blis_src))}
    return {**({} if args.batchtwin_only else blis),
            "batchtwin": (batchtwin_command(size, rate), ROOT)}


def median_of(rounds: list[Round], sim: str, field: str) -> float:
    return statistics.median(getattr(r, field) for r in rounds if r.sim == sim)


def print_table(rounds: list[Round]) -> None:
    """One size and rate: medians per simulator and batchtwin / BLIS."""
    first = rounds[0]
    sims = [s for s in ("blis", "batchtwin") if any(r.sim == s for r in rounds)]
    print(f"\n{first.size} requests at rate {first.rate} "
          f"(median of {len(rounds) // len(sims)} rounds)")
    fields = ("cpu_s", "rss_mb", "ttft_p50_ms", "tpot_p50_ms", "completed")
    print(f"{'':16s}{'CPU s':>10s}{'peak RSS MB':>13s}{'TTFT p50 ms':>13s}"
          f"{'TPOT p50 ms':>13s}{'completed':>11s}")
    med = {s: [median_of(rounds, s, f) for f in fields] for s in sims}
    for s in sims:
        cpu, rss, ttft, tpot, done = med[s]
        print(f"{s:16s}{cpu:10.2f}{rss:13.1f}{ttft:13.2f}{tpot:13.3f}{done:11.0f}")
    if len(sims) == 2:
        print_ratios(med["blis"], med["batchtwin"])


def print_ratios(blis: list[float], batchtwin: list[float]) -> None:
    """batchtwin / BLIS of CPU, RSS, TTFT and TPOT (the medians' order in print_table)."""
    ratio = [b / a for a, b in zip(blis[:4], batchtwin[:4], strict=True)]
    print(f"{'batchtwin/BLIS':16s}{ratio[0]:9.2f}x{ratio[1]:12.2f}x"
          f"{ratio[2]:12.2f}x{ratio[3]:12.2f}x")


def check_blis(args) -> None:
    """SystemExit naming how to build BLIS when its binary or source folder is missing."""
    if args.batchtwin_only:
        return
    if not os.access(args.blis_bin, os.X_OK) or not Path(args.blis_src, "model_configs").is_dir():
        raise SystemExit(
            f"bench_peer: no BLIS binary at {args.blis_bin} (or no model_configs/ in "
            f"{args.blis_src}). Build it as {BLIS_README} says (build_blis.sh beside it: "
            "MIRROR=<fetched snapshots> WORK=~/blis-work bash build_blis.sh), pass "
            "--blis-bin/--blis-src, or run batchtwin's side alone with --batchtwin-only.")


def main(argv: list[str] | None = None) -> list[Round]:
    args = _parser().parse_args(argv)
    check_blis(args)
    rounds, commands = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            for rate in args.rates:
                size_rounds = one_size(args, size, rate, Path(tmp), commands)
                print_table(size_rounds)
                rounds += size_rounds
    print_commands(commands)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"cpu": cpu_model(), "commands": commands, "rounds": [asdict(r) for r in rounds]},
            indent=1))
    return rounds


def print_commands(commands: dict[str, dict[str, str]]) -> None:
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nCPU: {cpu_model()}, {os.cpu_count()} cores; this process's peak RSS (a floor "
          f"under each child's) {floor:.1f} MB; commands (the trace paths were temporary):")
    for tag, cmds in commands.items():
        for sim, cmd in cmds.items():
            print(f"  {tag} {sim}: {cmd}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rates", "--rate", type=float, nargs="+", default=[20.0],
                   help="requests/s; inf: every arrival at t=0")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blis-bin", default=str(Path.home() / "blis-work/blis-bin"))
    p.add_argument("--blis-src", default=str(Path.home() / "blis-work/blis"),
                   help="BLIS source folder (its model_configs/; BLIS runs there)")
    p.add_argument("--batchtwin-only", action="store_true", help="skip BLIS")
    p.add_argument("--json", default=None, metavar="OUT", help="write the per-round numbers")
    return p


if __name__ == "__main__":
    main()
