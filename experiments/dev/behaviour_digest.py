"""Behaviour digests: a SHA-256 of every StepRecord and RequestRecord of a fixed set of runs,
to show that a change which should not change behaviour (a move, a refactor) did not.

    python -m experiments.dev.behaviour_digest [--out digests.json] [--against old.json]

The runs: single engines over engine configs x workloads x decode runs on/off x both cost
models, fleets behind two routers, disaggregated xPyD layouts, a MoE model with expert
parallelism, and the real executor's traces on the tiny checkpoint under the agreement
clock. Each run prints one line `name steps-digest requests-digest header-digest`; the
StepRecords' times are in the digest (simulated time is deterministic). `--against` compares
with a saved file and exits 1 naming every run whose records differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from shared import (
    EngineConfig,
    MultiTurn,
    SamplingParams,
    SharedPrefix,
    ShareGPTLike,
    Synthetic,
    Trace,
    Workload,
)

VOCAB = 32000
ENGINE_CONFIGS = {
    "default": {},
    "no_radix": {"disable_radix_cache": True},
    "mixed_chunk": {"enable_mixed_chunk": True, "chunked_prefill_size": 512},
    "no_overlap_lpm_page16": {"disable_overlap_schedule": True, "schedule_policy": "lpm",
                              "page_size": 16, "max_total_tokens": 6000},
}


def workloads() -> dict[str, Workload]:
    return {
        "sharegpt": ShareGPTLike(60, prompt_median=300, output_median=80).build(vocab_size=VOCAB,
                                                                                seed=1, rate=20.0),
        "shared_prefix": SharedPrefix(4, 12, 600, 60, 40).build(vocab_size=VOCAB, seed=2,
                                                                rate=30.0),
        "multi_turn": MultiTurn(8, 3, user_len=80, output_len=40).build(vocab_size=VOCAB, seed=3,
                                                                        rate=4.0),
    }


def fingerprint(trace: Trace | dict) -> tuple[str, ...]:
    """(steps, requests, header) SHA-256 hex digests of one trace; (summary,) of a summary."""
    if isinstance(trace, dict):
        return (hashlib.sha256(repr(sorted(trace.items())).encode()).hexdigest()[:16],)
    steps = hashlib.sha256()
    for record in trace.steps:
        steps.update(repr(dataclasses.astuple(record)).encode())
    requests = hashlib.sha256()
    for rid in sorted(trace.requests):
        requests.update(json.dumps(trace.requests[rid].to_dict(), sort_keys=True).encode())
    header = json.dumps({"model_config": trace.model_config, "executor": trace.executor},
                        sort_keys=True, default=str)
    return steps.hexdigest()[:16], requests.hexdigest()[:16], hashlib.sha256(header.encode()).hexdigest()[:16]


def single_runs() -> Iterator[tuple[str, Callable[[], list[Trace]]]]:
    from sim.run.build import build_simulation
    from sim.run.driver import drive_workload

    def run(workload: Workload, cost: str, decode_runs: bool, engine: dict) -> list[Trace]:
        s = build_simulation(model="llama-3-8b", hardware="h100", cost_model=cost, **engine)
        return [drive_workload(s.scheduler, s.runner, workload, finished_hook=s.token_source.finished,
                               decode_runs=decode_runs)]

    for wname, workload in workloads().items():
        for ename, engine in ENGINE_CONFIGS.items():
            for cost in ("roofline", "kernel"):
                for runs in (True, False):
                    name = f"single/{wname}/{ename}/{cost}/{'runs' if runs else 'steps'}"
                    yield name, (lambda w=workload, c=cost, r=runs, e=engine: run(w, c, r, e))


def result_traces(result: Any) -> list[Any]:
    """Every engine's trace of a run's result (a disaggregated run's prefill instances
    first), then its summary (a dict)."""
    return [*result.traces, result.summary]


def layout_runs() -> Iterator[tuple[str, Callable[[], list[Trace]]]]:
    from sim.fleet.disagg_layout import Disaggregated
    from sim.fleet.fleet_layout import Fleet
    from sim.run.deployment import Deployment
    from sim.run.simulate import simulate

    w = workloads()
    for router in ("round_robin", "cache_aware"):
        for cost in ("roofline", "kernel"):
            yield (f"fleet/3x/{router}/{cost}",
                   lambda r=router, c=cost: result_traces(simulate(
                       w["shared_prefix"], Deployment("qwen2.5-7b", cost_model=c), Fleet(3, r),
                       keep_trace=True)))
    for cost in ("roofline", "kernel"):
        yield (f"disagg/2p1d/{cost}",
               lambda c=cost: result_traces(simulate(
                   w["sharegpt"], Deployment("llama-3-8b", cost_model=c), Disaggregated(2, 1))))
    yield ("moe/qwen3-30b-a3b/tp2ep2/kernel",
           lambda: result_traces(simulate(w["sharegpt"], model="qwen3-30b-a3b", tp=2, ep_size=2,
                                          cost_model="kernel", expert_zipf=0.5,
                                          keep_trace=True)))


def exec_runs() -> Iterator[tuple[str, Callable[[], list[Trace]]]]:
    from experiments.dev.tiny_exec import TINY_INFO, TinyExec
    from experiments.dev.tiny_models import make_checkpoint
    from sim.conformance import ConformanceCase, check_conformance

    holder: dict[str, Any] = {}

    def tiny() -> Any:
        if "exec" not in holder:
            folder = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
            make_checkpoint(folder, "llama")
            holder["exec"] = TinyExec(folder)
        return holder["exec"]

    def case(engine: dict, seed: int) -> ConformanceCase:
        params = SamplingParams(max_new_tokens=12, temperature=0.8, sampling_seed=seed)
        workload = Synthetic(10, 24, 12, sampling_params=params).build(
            vocab_size=TINY_INFO.vocab_size, seed=seed, rate=2000.0)
        return ConformanceCase(EngineConfig(max_total_tokens=400, **engine), workload, TINY_INFO)

    for ename, engine in (("default", {}), ("no_overlap_chunked", {"disable_overlap_schedule": True,
                                                                   "chunked_prefill_size": 16}),
                          ("no_radix_page4", {"disable_radix_cache": True, "page_size": 4})):
        yield (f"exec/tiny-llama/{ename}",
               lambda e=engine: [check_conformance(tiny().make_runner, case(e, 7), clock=tiny().clock,
                                                 header=tiny().header)])


def all_runs(with_exec: bool) -> Iterator[tuple[str, Callable[[], list[Trace]]]]:
    yield from single_runs()
    yield from layout_runs()
    if with_exec:
        yield from exec_runs()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the digests as JSON here")
    parser.add_argument("--against", type=Path, help="a saved --out file to compare with")
    parser.add_argument("--no-exec", action="store_true", help="skip the real executor's runs")
    args = parser.parse_args(argv)
    digests: dict[str, list[list[str]]] = {}
    for name, run in all_runs(not args.no_exec):
        digests[name] = [list(fingerprint(t)) for t in run()]
        print(name, " ".join("/".join(d) for d in digests[name]), flush=True)
    print(f"{len(digests)} runs, {sum(map(len, digests.values()))} traces")
    if args.out:
        args.out.write_text(json.dumps(digests, indent=1, sort_keys=True))
    if args.against:
        return compare(json.loads(args.against.read_text()), digests)
    return 0


def _records(digests: list[list[str]] | None) -> list[list[str]] | None:
    """The step and request digests of a run's traces (a summary's one digest kept whole)."""
    return [d[:2] for d in digests] if digests else digests


def compare(old: dict[str, list[list[str]]], new: dict[str, list[list[str]]]) -> int:
    """0 when every run's step and request digests agree; prints each difference."""
    bad = 0
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if _records(a) != _records(b):
            bad += 1
            print(f"DIFFERS {name}: {a} != {b}")
        elif a != b:
            print(f"header only {name}: {a} != {b}")
    print("records identical" if not bad else f"{bad} runs differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
