"""`batchtwin serve --simulate`: an OpenAI-compatible server whose answers come from the
simulator, paced in wall-clock time (`sim.online_sim`; `--time-scale 10` runs ten times
faster than the simulated GPU), for testing routers, gateways and clients without GPUs.

    batchtwin serve --simulate --model llama-3-70b --hardware h100 --tp 4 --port 8000

The real executor's mode (`batchtwin serve MODEL_PATH`) is not built yet: the command says so.
Needs the `serve` extra (FastAPI, uvicorn, prometheus_client).
"""

from __future__ import annotations

import argparse

from experiments.arg_types import positive_int

HELP = "an OpenAI-compatible server run by the simulator (--simulate)"
SERVE_HINT = 'batchtwin serve needs the serve extra: pip install -e ".[serve]"'


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_path", nargs="?", default=None, help="(real mode: not built yet)")
    p.add_argument("--simulate", action="store_true", help="answer from the simulator")
    p.add_argument("--model", default="llama-3-8b", help="embedded key or config.json path")
    p.add_argument("--served-model-name", default=None, help="the name clients ask for")
    p.add_argument("--hardware", default="h100")
    p.add_argument("--tp", type=positive_int, default=1)
    p.add_argument("--cost-model", default=None, metavar="NAME|JSON")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="simulated seconds per wall second (default 1: real time)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=positive_int, default=30000)


def build_app(args: argparse.Namespace):
    """The app the flags describe (bad input raises ValueError before anything listens)."""
    try:
        from experiments.serve.app import create_app
    except ImportError:
        raise ValueError(SERVE_HINT) from None
    from experiments.serve.text_codec import PlaceholderCodec
    from sim.online_sim import SimulatedOnlineEngine
    from sim.simulate import build_simulation

    if not args.simulate:
        raise ValueError("real mode (batchtwin serve MODEL_PATH) is not built yet; use --simulate")
    s = build_simulation(model=args.model, hardware=args.hardware, tp=args.tp,
                         cost_model=args.cost_model, seed=args.seed)
    engine = SimulatedOnlineEngine(s, args.served_model_name or args.model, args.time_scale)
    return create_app(engine, PlaceholderCodec(engine.vocab_size))


def run(args: argparse.Namespace) -> int:
    app = build_app(args)
    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
