"""Benchmark: `bench_sim`'s real-time ratio of an older commit against this checkout, in one
run (issue 21's bar: the new code falls by at most 10%).

    python -m experiments.bench.bench_sim_compare [--old e863ede] [--rounds 5] [--repeats 3]

Checks the old commit out into a temporary git worktree, then alternates `python -m
experiments.bench.bench_sim --repeats R` in the old tree and in this one, `--rounds` times, so
both see the same machine state; prints, per configuration both trees run, the median over
rounds of each tree's best-of-R simulated-seconds-per-wall-second and their ratio
(new / old). The worktree is removed afterwards. Prints the CPU model: the ratio is
measured on that kind.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.bench.cpu_info import cpu_model

ROOT = Path(__file__).resolve().parents[2]
OLD = "e863ede"   # the last commit before issue 21's cost model work


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        _git("worktree", "add", "--detach", str(old_tree), args.old)
        try:
            runs = _alternate(old_tree, Path(tmp), args.rounds, args.repeats)
        finally:
            _git("worktree", "remove", "--force", str(old_tree))
    print(f"bench_sim, {args.rounds} rounds of best-of-{args.repeats}, {cpu_model()}")
    for name, (old, new) in _medians(runs).items():
        print(f"  {name:22s} old {old:7.1f}x  new {new:7.1f}x  new/old {new / old:.3f}")


def _alternate(old_tree: Path, tmp: Path, rounds: int, repeats: int) -> list[tuple[dict, dict]]:
    """[(old results, new results)] per round, bench_sim's JSON."""
    runs = []
    for i in range(rounds):
        pair = tuple(_bench(tree, tmp / f"{label}{i}.json", repeats)
                     for tree, label in ((old_tree, "old"), (ROOT, "new")))
        runs.append(pair)
    return runs


def _bench(tree: Path, out: Path, repeats: int) -> dict:
    # NOTE: bench_sim moved into experiments/bench/; an older commit has it at the top.
    module = ("experiments.bench.bench_sim" if (tree / "experiments/bench/bench_sim.py").exists()
              else "experiments.bench_sim")
    subprocess.run([sys.executable, "-m", module, "--repeats", str(repeats),
                    "--out", str(out)], cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def _medians(runs: list[tuple[dict, dict]]) -> dict[str, tuple[float, float]]:
    """{configuration both ran: (old median speedup, new median speedup)}."""
    names = [n for n in runs[0][1]["engine_configs"] if n in runs[0][0]["engine_configs"]]
    return {n: tuple(statistics.median(r[k][n]["best"]["speedup"] for r in runs)
                     for k in (0, 1)) for n in names}


def _git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.bench.bench_sim_compare",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--old", default=OLD, help=f"the older commit (default {OLD})")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3, help="bench_sim's --repeats")
    return p


if __name__ == "__main__":
    main()
