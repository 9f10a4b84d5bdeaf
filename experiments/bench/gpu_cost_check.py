"""The kernel cost model against the real executor on a GPU (issue 21 §7): one script for a
lent H200, sized to finish in under 10 minutes.

    python -m experiments.bench.gpu_cost_check [--model llama-3.1-8b] [--hardware h200]
    python -m experiments.bench.gpu_cost_check --tiny      # the same path on CPU, a tiny model

It writes a checkpoint with random weights in the model's real shapes (an embedded sim
config, bf16), serves a grid of batch shapes on `exec`'s Engine (closed batches of 1 to 128
requests, prompts of 128 to 4096 tokens, all queued at once) and one Poisson online run,
then compares each recorded trace with the simulator's prediction of the same steps
(`experiments.calibration.fidelity.compare`: `sim.run.replay` teacher-forced per-step median
APE and MAPE, and the free-running TTFT/TPOT p50/p90 errors) with the kernel cost model of
`--hardware`. Prints a table and writes experiments/results/gpu_cost_check.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

GRID = ((1, 128), (8, 1024), (32, 1024), (128, 128), (32, 4096))   # (requests, prompt len)
OUTPUT_LEN = 64
TINY = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 2048}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import torch

    from sim.cost.kernel.model import KernelCostModel
    from sim.hardware.lookup import get_hardware
    from sim.model.from_config import config_dict, shape_from_config

    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (or pass --tiny for the CPU path)")
        return 1
    config = {**config_dict(args.model), **(TINY if args.tiny else {}), "torch_dtype": "bfloat16"}
    cost = KernelCostModel(shape_from_config(config, args.model), get_hardware(args.hardware))
    with tempfile.TemporaryDirectory() as folder:
        engine = _engine(_checkpoint(Path(folder), config), device, args.tiny)
        rows = [_row(name, engine, workload, cost) for name, workload in _workloads(engine, args)]
    _report(rows, args.out)
    return 0


def _checkpoint(folder: Path, config: dict) -> Path:
    from experiments.tiny_checkpoint import write_random_checkpoint

    return write_random_checkpoint(folder, config)


def _engine(path: Path, device: str, tiny: bool):
    from exec.engine.engine import Engine

    return Engine(path, device=device, dtype="float32" if tiny else "bfloat16")


def _workloads(engine, args):
    from shared import SamplingParams, ShareGPTLike, Synthetic

    vocab = engine.model_info.vocab_size
    params = SamplingParams(max_new_tokens=OUTPUT_LEN, ignore_eos=True)
    scale = 8 if args.tiny else 1
    for n, length in GRID:
        yield f"batch {n} x {length}", Synthetic(
            n, length // scale, OUTPUT_LEN, sampling_params=params).build(vocab_size=vocab,
                                                                          rate=float("inf"))
    online = ShareGPTLike(args.requests, sampling_params=params, max_len=4096 // scale)
    yield f"online {args.rate}/s", online.build(vocab_size=vocab, rate=args.rate, seed=0)


def _row(name: str, engine, workload, cost) -> dict:
    from experiments.calibration.fidelity import compare

    engine.reset()
    errors = compare(engine.run(workload), cost).errors
    print(f"{name:>18}: per-step median APE {errors['teacher_forced_median_ape']:.3f}, MAPE "
          f"{errors['teacher_forced_mape']:.3f}; TTFT p50 {errors['ttft_p50_error']:+.3f}, "
          f"TPOT p50 {errors['tpot_p50_error']:+.3f}", flush=True)
    return {"workload": name, **errors}


def _report(rows: list[dict], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.bench.gpu_cost_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama-3.1-8b", help="an embedded sim config")
    p.add_argument("--hardware", default="h200", help="the cost model's hardware key")
    p.add_argument("--requests", type=int, default=64, help="online run: requests")
    p.add_argument("--rate", type=float, default=8.0, help="online run: requests per second")
    p.add_argument("--tiny", action="store_true", help="a tiny model on CPU (smoke test)")
    p.add_argument("--out", type=Path, default=Path("experiments/results/gpu_cost_check.json"))
    return p


if __name__ == "__main__":
    raise SystemExit(main())
