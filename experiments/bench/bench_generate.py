"""Benchmark: real generation speed of the exec Engine against Hugging Face `generate`,
on the same (dequantised) weights, in one run.

Offline workload: N requests x P prompt tokens x O output tokens, greedy, ignore_eos.
Reports output tokens/s of both at batch N and their ratio, decode tokens/s of both (the
O-token run less a 1-token run, each on prompts neither has seen) and their ratio, and the
batch-1 decode step time of the Engine against the weight-streaming bound (bytes of weights
read per step divided by the memory bandwidth measured in the same run; of a MoE layer's
experts, the k of E a token uses).

    python -m experiments.bench.bench_generate [--model PATH|tiny-mixtral|tiny-qwen3-moe]
        [--threads 2] [--dtype bfloat16|float32] [--no-torch-compile]

`--model tiny-mixtral` / `tiny-qwen3-moe` write a random-weight MoE checkpoint
(`experiments.tiny_checkpoint.TINY_MOE`) to a temporary folder and run it.

Both schedules in the same run: the Engine (SGLang's default overlap schedule: a step's
forward runs on a worker thread while the last step's result is processed) against a
second Engine on the same weights with `disable_overlap_schedule=True`, alternated,
at batch N and batch 1 (wall time per output token).

Writes experiments/results/bench_generate.json with the configuration it ran and the machine
(CPU model, torch's CPU kernel level, whether the weights were packed for oneDNN).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from exec.layers.packed_linear import PackedLinear
from exec.models.moe_block import SparseMoeBlock
from experiments.bench.cpu_info import cpu_model
from experiments.calibration.machine_probe import measure_bandwidth
from experiments.tiny_checkpoint import TINY_MOE, write_tiny_checkpoint


@dataclass(frozen=True)
class GenerateBenchConfig:
    model: str | None = None
    requests: int = 32
    prompt_len: int = 128
    output_len: int = 128
    threads: int = 2
    dtype: str = "bfloat16"
    device: str = "cpu"
    batch1_steps: int = 48
    seed: int = 0
    torch_compile: bool = True   # Engine(torch_compile=True): decode steps compiled
    torch_compile_max_bs: int = 32  # the largest decode batch compiled (SGLang's default)


def weight_bytes_per_step(model: torch.nn.Module) -> int:
    """Bytes of weights one decode step reads: every matrix once (the LM head's included),
    counted logically (out x in x element size), whether a Parameter or pre-packed
    (`exec.layers.packed_linear.PackedLinear`). The embedding lookup reads one row, so the embedding
    table counts only as the tied LM head when no packed head holds its own copy. A MoE
    layer's stacked experts count k / E (a batch-1 token reads its k experts)."""
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    packed_bytes = sum(m.out_features * m.in_features * m.packed.element_size()
                       + (m.bias.numel() * m.bias.element_size() if m.bias is not None else 0)
                       for m in packed)
    embed = model.model.embed_tokens.weight
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    if hasattr(model, "packed_lm_head"):
        params -= embed.numel() * embed.element_size()
    return params + packed_bytes - idle_expert_bytes(model)


def idle_expert_bytes(model: torch.nn.Module) -> int:
    """Bytes of the stacked experts a batch-1 token does not read: (E - k) / E of each."""
    idle = 0
    for block in (m for m in model.modules() if isinstance(m, SparseMoeBlock)):
        experts = sum(p.numel() * p.element_size() for p in (block.gate_up, block.down))
        idle += experts * (block.gate_up.shape[0] - block.top_k) // block.gate_up.shape[0]
    return idle


def prompts(c: GenerateBenchConfig, vocab: int, seed_offset: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(c.seed + seed_offset)
    return rng.integers(10, vocab - 10, size=(c.requests, c.prompt_len)).tolist()


def decode_tok_s(generate, vocab: int, c: GenerateBenchConfig) -> float:
    """Decode tokens/s at batch N: N requests generating O tokens less the same generating 1
    (prefill and the first token), `generate(prompts, n)` timed on prompts never seen before
    (no prefix-cache hit), so N * (O - 1) tokens over the difference of the two wall times."""
    times = []
    for offset, n in ((1, 1), (2, c.output_len)):
        t = time.perf_counter()
        generate(prompts(c, vocab, offset), n)
        times.append(time.perf_counter() - t)
    return c.requests * (c.output_len - 1) / (times[1] - times[0])


def engine_generate(engine):
    def generate(ps: list[list[int]], n: int) -> None:
        engine.generate(ps, {"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
    return generate


def hf_generate(model, device: str):
    kw = {"do_sample": False, "pad_token_id": 0, "eos_token_id": None}

    def generate(ps: list[list[int]], n: int) -> None:
        with torch.inference_mode():
            model.generate(torch.tensor(ps, device=device), max_new_tokens=n, min_new_tokens=n, **kw)
    return generate


def engine_throughput(engine, ps: list[list[int]], c: GenerateBenchConfig) -> float:
    params = {"max_new_tokens": c.output_len, "temperature": 0, "ignore_eos": True}
    engine.generate(ps[:2], {**params, "max_new_tokens": 4})  # warm-up
    t = time.perf_counter()
    outs = engine.generate(ps, params)
    return sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t)


def batch1_token_time(engine, ps: list[list[int]], c: GenerateBenchConfig) -> float:
    """Wall seconds per output token of one request generating `batch1_steps` tokens alone."""
    params = {"max_new_tokens": c.batch1_steps, "temperature": 0, "ignore_eos": True}
    t = time.perf_counter()
    out = engine.generate(ps[0], params)
    return (time.perf_counter() - t) / len(out.token_ids)


def schedule_comparison(engine, plain, ps: list[list[int]], c: GenerateBenchConfig,
                        rounds: int = 2) -> dict:
    """Overlap (`engine`) against no overlap (`plain`), alternated `rounds` times: median
    batch-N tokens/s and batch-1 seconds per token of each, and their ratios."""
    runs: dict[str, dict[str, list[float]]] = {"overlap": {}, "plain": {}}
    for _ in range(rounds):
        for name, e in (("overlap", engine), ("plain", plain)):
            runs[name].setdefault("tok_s", []).append(engine_throughput(e, ps, c))
            runs[name].setdefault("batch1_s_per_token", []).append(batch1_token_time(e, ps, c))
    med = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in runs.items()}
    return {"overlap_tok_s": med["overlap"]["tok_s"], "plain_tok_s": med["plain"]["tok_s"],
            "overlap_over_plain_tok_s": med["overlap"]["tok_s"] / med["plain"]["tok_s"],
            "overlap_batch1_s_per_token": med["overlap"]["batch1_s_per_token"],
            "plain_batch1_s_per_token": med["plain"]["batch1_s_per_token"],
            "plain_over_overlap_batch1": (med["plain"]["batch1_s_per_token"]
                                          / med["overlap"]["batch1_s_per_token"])}


def hf_model(engine, model_path: str | None):
    """transformers' model of the checkpoint folder (its weights), or for a GGUF file its
    class on the same config (the same shapes)."""
    import transformers

    if model_path is not None and Path(model_path).is_dir():
        return transformers.AutoModelForCausalLM.from_pretrained(
            model_path, dtype=engine.runner.dtype).eval()
    raw = {k: v for k, v in engine.model_config.raw.items() if k != "architectures"}
    cls = getattr(transformers, engine.model_config.names[0])
    model = cls(cls.config_class(**raw)).eval()
    model.load_state_dict(engine.runner.model.state_dict(), strict=False)
    return model.to(engine.runner.dtype)


def hf_throughput(model, ps: list[list[int]], c: GenerateBenchConfig) -> float:
    model = model.to(c.device)
    ids = torch.tensor(ps, device=c.device)
    kw = {"do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    model.generate(ids[:2], max_new_tokens=4, min_new_tokens=4, **kw)
    t = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=c.output_len, min_new_tokens=c.output_len, **kw)
    return (out.shape[1] - ids.shape[1]) * ids.shape[0] / (time.perf_counter() - t)


def batch1_decode_step(engine, ps: list[list[int]], c: GenerateBenchConfig) -> float:
    """Median decode step of one request generating `batch1_steps` tokens alone."""
    params = {"max_new_tokens": c.batch1_steps, "temperature": 0, "ignore_eos": True}
    first = len(engine.trace)
    engine.generate(ps[0], params)
    steps = [s.duration for s in engine.trace.steps[first:] if s.forward_mode == "DECODE"]
    return statistics.median(steps)


def batch1_against_bound(engine, ps: list[list[int]], c: GenerateBenchConfig) -> dict:
    """The batch-1 step against the weight-streaming bound. A warm-up request first (the
    steps right after a compile, which the Engine runs when built, are some 15% slower),
    then the timed request between two bandwidth readings: this VM's reading moves by tens
    of percent within minutes. The bound takes the higher reading, so that a slow moment
    never flatters the engine."""
    engine.generate(ps[1], {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True})
    before = measure_bandwidth(c.device)
    step = batch1_decode_step(engine, ps, c)
    after = measure_bandwidth(c.device)
    bound = weight_bytes_per_step(engine.runner.model) / max(before, after)
    return {"batch1_decode_step_s": step, "weight_streaming_bound_s": bound,
            "batch1_over_bound": step / bound, "bandwidth_GBps_before": before / 1e9,
            "bandwidth_GBps_after": after / 1e9}


def machine_info(engine) -> dict:
    """The CPU, torch's CPU kernel level (AVX2, AVX512, ...) and whether the weights were
    pre-packed for oneDNN (bf16 packs only on CPUs with its bf16 kernels): the numbers
    depend on all three."""
    packed = any(isinstance(m, PackedLinear) for m in engine.runner.model.modules())
    return {"cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "weights_packed": packed}


def parse_config(argv: list[str] | None = None) -> tuple[GenerateBenchConfig, str]:
    """The benchmark's configuration and output path from the command line. Without
    --[no-]torch-compile, decode steps are compiled on CPU only (the compiled decode is the
    CPU path; CUDA replays CUDA graphs, and the runner refuses torch_compile there)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in asdict(GenerateBenchConfig()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction,
                           default=None if name == "torch_compile" else default)
            continue
        p.add_argument(flag, type=type(default) if default is not None else str, default=default)
    p.add_argument("--out", default="experiments/results/bench_generate.json")
    args = vars(p.parse_args(argv))
    out = args.pop("out")
    if args["torch_compile"] is None:
        args["torch_compile"] = torch.device(args["device"]).type == "cpu"
    return GenerateBenchConfig(**args), out


def main(argv: list[str] | None = None) -> dict:
    c, out = parse_config(argv)
    if c.model not in TINY_MOE:
        return run(c, c.model, out)
    with tempfile.TemporaryDirectory() as tmp:
        return run(c, str(write_tiny_checkpoint(Path(tmp) / c.model, moe=c.model)), out)


def run(c: GenerateBenchConfig, model_path: str | None, out: str) -> dict:
    from exec import Engine

    torch.set_num_threads(c.threads)
    engines = [Engine(model_path, device=c.device, dtype=c.dtype, torch_compile=c.torch_compile,
                      torch_compile_max_bs=c.torch_compile_max_bs,
                      max_total_tokens=c.requests * (c.prompt_len + c.output_len + 8),
                      disable_overlap_schedule=plain) for plain in (False, True)]
    engine = engines[0]
    ps = prompts(c, engine.model_info.vocab_size)
    batch1 = batch1_against_bound(engine, ps, c)
    ours = engine_throughput(engine, ps, c)
    reference = hf_model(engine, model_path).to(c.device)
    hf = hf_throughput(reference, ps, c)
    vocab = engine.model_info.vocab_size
    ours_decode = decode_tok_s(engine_generate(engine), vocab, c)
    hf_decode = decode_tok_s(hf_generate(reference, c.device), vocab, c)
    results = {"engine_output_tok_s": ours, "hf_output_tok_s": hf, "ratio": ours / hf,
               "engine_decode_tok_s": ours_decode, "hf_decode_tok_s": hf_decode,
               "decode_ratio": ours_decode / hf_decode, **batch1,
               **schedule_comparison(engine, engines[1], ps, c)}
    for k, v in results.items():
        print(f"{k:>26}: {v:.4g}")
    machine = machine_info(engine)
    print(f"{'machine':>26}: {machine}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"config": asdict(c), "machine": machine, "results": results},
                                    indent=2))
    return results


if __name__ == "__main__":
    main()
