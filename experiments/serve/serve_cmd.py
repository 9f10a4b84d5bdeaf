"""`batchtwin serve`: an OpenAI-compatible server (plus SGLang's /generate and
/get_server_info) run by the real executor or by the simulator.

    batchtwin serve                                   # real: SmolLM2-135M-Instruct on CPU
    batchtwin serve path/to/checkpoint --device cuda  # real: a checkpoint folder or .gguf
    batchtwin serve --simulate --model llama-3-70b --hardware h100 --tp 4 --time-scale 10

Both modes take SGLang's engine flags (the EngineConfig fields: --max-running-requests,
--chunked-prefill-size, --max-total-tokens, ...). Simulated answers are paced in wall-clock
time (`sim.run.online_sim`; `--time-scale 10` runs ten times faster than the simulated GPU), its
text placeholder tokens (`experiments.serve.text_codec`). Needs the `serve` extra (FastAPI,
uvicorn, prometheus_client); real mode the `exec` extra too.
"""

from __future__ import annotations

import argparse

from experiments.cli.arg_types import non_negative_int, positive_int
from experiments.cli.flags import engine_args, engine_arguments
from experiments.cli.output_paths import check_output_file

HELP = "an OpenAI-compatible server run by the real executor or the simulator (--simulate)"
SERVE_HINT = 'batchtwin serve needs the serve extra: pip install -e ".[serve]"'
DEFAULT_SIM_MODEL = "llama-3-8b"
DEFAULT_REAL_NAME = "SmolLM2-135M-Instruct"
SIM_ONLY = ("hardware", "cost_model", "time_scale", "output_len_median", "output_len_sigma")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_path", nargs="?", default=None,
                   help="real mode: checkpoint folder or .gguf (default: SmolLM2-135M-Instruct)")
    p.add_argument("--model", default=None,
                   help=f"--simulate: embedded key or config.json (default {DEFAULT_SIM_MODEL}); "
                        "real mode: same as MODEL_PATH")
    p.add_argument("--served-model-name", default=None, help="the name clients ask for")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=positive_int, default=30000)
    p.add_argument("--max-queued-requests", type=non_negative_int, default=None,
                   help="answer 503 (Retry-After) while this many requests wait for a first token")
    p.add_argument("--trace-out", default=None, metavar="TRACE.jsonl",
                   help="save the step trace at shutdown (batchtwin replay takes it)")
    s = p.add_argument_group("simulated mode")
    s.add_argument("--simulate", action="store_true", help="answer from the simulator")
    s.add_argument("--hardware", default=None, help="catalogue key or hardware JSON (default h100)")
    s.add_argument("--tp", type=positive_int, default=1)
    s.add_argument("--cost-model", default=None, metavar="NAME|JSON")
    s.add_argument("--time-scale", type=float, default=None,
                   help="simulated seconds per wall second (default 1: real time)")
    s.add_argument("--seed", type=int, default=0, help="seed of the simulated tokens")
    s.add_argument("--output-len-median", type=positive_int, default=None, metavar="TOKENS",
                   help="answers end with EOS at a lognormal length of this median (default: "
                        "at max_tokens); ignore_eos requests run to max_tokens")
    s.add_argument("--output-len-sigma", type=float, default=None,
                   help="sigma of that lognormal (default 1.0, ShareGPT's shape)")
    r = p.add_argument_group("real mode")
    r.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    r.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    r.add_argument("--threads", type=positive_int, default=None, metavar="N", help="torch threads")
    p.add_argument("--kv-cache-dtype", default="auto",
                   choices=("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16"))
    engine_arguments(p.add_argument_group("engine (EngineConfig fields)"))


def build_app(args: argparse.Namespace):
    """The app the flags describe (bad input raises ValueError before anything listens)."""
    try:
        from experiments.serve.app import create_app
    except ImportError:
        raise ValueError(SERVE_HINT) from None
    from experiments.serve.options import ServeOptions

    if args.trace_out:
        check_output_file(args.trace_out, "--trace-out")
    engine, codec = (_simulated if args.simulate else _real)(args)
    return create_app(engine, codec, ServeOptions(args.max_queued_requests, args.trace_out))


def _simulated(args: argparse.Namespace):
    from experiments.serve.text_codec import simulated_codec
    from shared.online.serving_loop import ServingLoop
    from sim.run.build import build_simulation
    from sim.run.online_sim import SimStepper

    if args.model_path is not None:
        raise ValueError(f"MODEL_PATH ({args.model_path}) is the real executor's; with --simulate "
                         "name the model with --model")
    model = args.model or DEFAULT_SIM_MODEL
    s = build_simulation(model=model, hardware=args.hardware or "h100", tp=args.tp,
                         cost_model=args.cost_model, seed=args.seed,
                         kv_cache_dtype=args.kv_cache_dtype, **engine_args(args))
    engine = ServingLoop(SimStepper(s, args.served_model_name or model,
                                    1.0 if args.time_scale is None else args.time_scale,
                                    output_lengths=_output_lengths(args, s.scheduler.model_info)))
    return engine, simulated_codec(model, engine.vocab_size, s.scheduler.model_info.eos_token_ids)


def _output_lengths(args: argparse.Namespace, info):
    from shared.workload.length_dist import LogNormal
    from sim.run.output_lengths import OutputLengths

    if args.output_len_median is None:
        if args.output_len_sigma is not None:
            raise ValueError("--output-len-sigma goes with --output-len-median")
        return None
    if not info.eos_token_ids:
        raise ValueError("--output-len-median ends answers with the model's EOS; this model "
                         "config names none (eos_token_id)")
    sigma = 1.0 if args.output_len_sigma is None else args.output_len_sigma
    return OutputLengths(LogNormal(args.output_len_median, sigma), info.eos_token_ids[0], args.seed)


def _real(args: argparse.Namespace):
    given = [f"--{n.replace('_', '-')}" for n in SIM_ONLY if getattr(args, n) is not None]
    if given:
        raise ValueError(f"{', '.join(given)} go(es) with --simulate")
    if args.tp != 1:
        raise ValueError("the real executor serves on one process (--tp 1); tensor parallelism "
                         "runs through batchtwin generate --tp")
    if args.model_path and args.model and args.model != args.model_path:
        raise ValueError(f"MODEL_PATH {args.model_path!r} and --model {args.model!r} differ; give one")
    return _real_engine(args, args.model_path or args.model)


def _real_engine(args: argparse.Namespace, path: str | None):
    import torch

    from exec.engine.engine import Engine
    from exec.engine.online_engine import ExecStepper
    from experiments.serve.text_codec import EngineCodec
    from shared.online.serving_loop import ServingLoop

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    engine = Engine(path, device=args.device, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
                    **engine_args(args))
    name = args.served_model_name or path or DEFAULT_REAL_NAME
    return ServingLoop(ExecStepper(engine, name, path)), EngineCodec(engine)


def run(args: argparse.Namespace) -> int:
    app = build_app(args)
    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
