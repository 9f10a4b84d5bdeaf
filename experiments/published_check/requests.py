"""A calibration row's requests, as one engine runs them (`WorkloadSpec`): how many, their
lengths (fixed, ShareGPT-like, or a named dataset's: `experiments.published_check.mlperf`)
and their arrivals (a rate, all at once, a closed loop, or a Server run's target QPS), each
of a system's replicas taking its share; and the prefill-only and decode-only stress tests'
own shapes. A cell it cannot read raises `Refused` with the reason.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from experiments.published_check.mlperf import dataset_lengths
from experiments.published_check.row_spec import WorkloadSpec
from shared.workload.length_dist import Uniform

# NOTE: the LMSYS large-EP runs: a device's prefill batch (published for the 4K case).
PREFILL_TOKENS_PER_DEVICE = 16384
PREFILL_ROUNDS = 4
DECODE_OUTPUT_LEN = 200
# NOTE: LoadGen's own runs hold 50,000-83,000 samples per engine (target QPS x min_duration
# over the engines: AMD Mixtral 380 x 1200 s / 8 offline, 335 x 1200 s / 8 server; NVIDIA
# Llama-3.1-8B 1100 x 600 s / 8), so the drain of the last requests is a negligible part of
# them; 48,000 per engine is what this machine's memory runs (one process running the three
# rows peaks at 4.5 GB; a worker of the whole check at 10.5 GB).
LOADGEN_PROMPTS = 48000
# NOTE: prompt tokens one dataset run holds at most: 48,000 CNN-DailyMail samples' (the largest
# run above, 10.5 GB in a worker); longer prompts run fewer samples (gpt-oss: 8,382).
DATASET_PROMPT_TOKENS = 42e6
MAX_ROUNDS = 4   # closed-loop rounds simulated at most (the trace's memory)
RUN_MEAN = re.compile(r"\bmean=([\d.]+)")   # an output cell's published or derived run mean
SPREAD = re.compile(r"(?:\+-|±|\+/-)\s*(\d+)\s*%")   # a length cell's stated spread


class Refused(Exception):
    """A field the simulator cannot express; its message is the reason."""


def workload_of(row: Mapping[str, Any], metric: str, notes: list[str], dp: int = 1,
              engines: int = 1, layout: Any = None) -> WorkloadSpec:
    """One engine's requests: the row's lengths and count, arriving at its rate (each of
    `engines` replicas takes its share of the count and of the rate)."""
    rate, concurrency = _engine_arrivals(row, dp, engines, layout, notes)
    if metric in ("input_throughput", "decode_throughput"):
        return _phase_workload(row, metric, notes, dp, concurrency)
    dataset = _dataset_workload(row, rate, concurrency, notes, engines)
    if dataset is not None:
        return dataset
    spread = _spread(str(row["input_len"]), str(row["output_len"]), notes)
    inp, out, sharegpt = (0, 0, False) if spread else _lengths(str(row["input_len"]),
                                                                str(row["output_len"]), notes)
    n = _num_prompts(str(row["num_prompts"]), concurrency, notes, engines)
    if metric.startswith("ttft") and concurrency is not None and not str(row["num_prompts"]).isdigit():
        notes.append(f"TTFT of a closed loop, its count not published: one round of "
                     f"{concurrency} request(s)")
        n = concurrency
    if spread is not None:
        return WorkloadSpec(n, rate=rate, concurrency=concurrency, input_dist=spread[0],
                            output_dist=spread[1])
    return WorkloadSpec(n, inp, out, rate, concurrency, sharegpt)


def _spread(inp_text: str, out_text: str, notes: list[str]) -> tuple[Uniform, Uniform] | None:
    """Lengths uniform within the spread the cells state ("+-15%": vLLM's random dataset at
    --random-range-ratio 0.15, lengths in [L(1 - r), L(1 + r)]), None when they state none."""
    found = [SPREAD.search(t) for t in (inp_text, out_text)]
    if not all(found):
        return None
    inp, out = first_number(inp_text), first_number(out_text)
    r_in, r_out = (int(m.group(1)) / 100 for m in found)
    notes.append(f"lengths uniform within +-{r_in:.0%} / +-{r_out:.0%} of {inp} / {out}")
    return (Uniform(round(inp * (1 - r_in)), round(inp * (1 + r_in))),
            Uniform(round(out * (1 - r_out)), round(out * (1 + r_out))))


def _engine_arrivals(row: Mapping[str, Any], dp: int, engines: int, layout: Any,
                     notes: list[str]) -> tuple[float, int | None]:
    """(rate, concurrency) of one engine: a Server run's target QPS from its submission, or
    the row's arrivals, divided over the replicas."""
    if layout is not None and layout.target_qps is not None:
        rate, concurrency = layout.target_qps, None
        notes.append(f"Server scenario: Poisson arrivals at the target QPS, {rate:g} req/s")
    else:
        rate, concurrency = _arrivals(str(row["request_rate_or_concurrency"]), dp)
    if engines > 1 and concurrency is not None:
        raise Refused(f"{engines} data-parallel replicas of a closed loop are not modelled")
    return rate / engines, concurrency


def _phase_workload(row: Mapping[str, Any], metric: str, notes: list[str], dp: int,
                    concurrency: int | None) -> WorkloadSpec:
    """One phase stressed alone: prefills of the published length (one output token), or a
    decode batch whose KV averages the published length over DECODE_OUTPUT_LEN steps."""
    length = first_number(str(row["input_len"]))
    if metric == "input_throughput":
        n = PREFILL_ROUNDS * dp * max(1, PREFILL_TOKENS_PER_DEVICE // length)
        notes.append(f"prefill only: {n} prompts of {length} tokens, 1 output token each")
        return WorkloadSpec(n, length, 1)
    if concurrency is None:
        raise Refused("a decode-only row needs its batch")
    notes.append(f"decode only: the step of {concurrency} requests at {length} KV tokens each, "
                 f"priced by the run's cost model; batch / step time")
    return WorkloadSpec(concurrency, length - DECODE_OUTPUT_LEN // 2, DECODE_OUTPUT_LEN,
                        concurrency=concurrency)


def _arrivals(text: str, dp: int = 1) -> tuple[float, int | None]:
    if text in ("inf", "offline") or text.startswith("saturating"):
        return math.inf, None
    if text.startswith("batch=") and "per device" in text:
        return math.inf, int(first_number(text)) * dp
    if text.startswith("rate="):
        return float(first_number(text)), None
    if text.startswith("conc="):
        return math.inf, int(first_number(text))
    raise Refused(f"arrivals {text!r} (a per-phase or target-QPS run) are not modelled")


def _dataset_workload(row: Mapping[str, Any], rate: float, concurrency: int | None,
                      notes: list[str], engines: int = 1) -> WorkloadSpec | None:
    """Lengths drawn like a named benchmark dataset's (`mlperf.DATASETS`), None for rows
    of other lengths."""
    lengths = dataset_lengths(str(row["input_len"]))
    if lengths is None:
        return None
    n = _num_prompts(str(row["num_prompts"]), concurrency, notes, engines)
    name = str(row["input_len"]).split()[0]
    most = int(DATASET_PROMPT_TOKENS // lengths.input.mean)
    if n > most:
        notes.append(f"{most} of the engine's {n} samples simulated (their prompts' "
                     f"{DATASET_PROMPT_TOKENS / 1e6:.0f}M tokens are what this machine's memory "
                     f"runs; the rest repeat the steady state)")
        n = most
    notes.append(f"{name} lengths: lognormal with the dataset's mean and log spread "
                 f"({lengths.samples} samples; {lengths.source})")
    output = lengths.output
    run_mean = RUN_MEAN.search(str(row["output_len"]))
    if run_mean is not None:   # the run's own mean output (generated, not the reference's)
        output = dataclasses.replace(output, mean=float(run_mean.group(1)))
        notes.append(f"outputs: the run's mean {output.mean:g} tokens, the dataset's log spread")
    return WorkloadSpec(n, rate=rate, concurrency=concurrency,
                        input_dist=lengths.input.lognormal(), output_dist=output.lognormal())


def _lengths(inp: str, out: str, notes: list[str]) -> tuple[int, int, bool]:
    if inp == out == "dataset:sharegpt":
        notes.append("ShareGPT lengths: the ShareGPT-like lognormal mix")
        return 0, 0, True
    if inp.startswith("mean=") and out.startswith("mean="):
        notes.append("ShareGPT-like lognormal lengths with the published means")
        return first_number(inp), first_number(out), True
    if inp.startswith("dataset") or out.startswith("dataset") or "n/" in out:
        raise Refused(f"lengths {inp!r} / {out!r} are not published")
    if not inp[0].isdigit() or not out[0].isdigit():
        notes.append(f"lengths {inp!r} / {out!r} taken as fixed")
    return first_number(inp), first_number(out), False


def _num_prompts(text: str, concurrency: int | None, notes: list[str], engines: int = 1
                 ) -> int:
    """A published count (one engine's share of it) or the simulated count for a count that
    is not published (per engine: LOADGEN_PROMPTS)."""
    if text.isdigit():
        n = max(1, int(text) // engines)
        if concurrency is not None and n > MAX_ROUNDS * concurrency:
            notes.append(f"{MAX_ROUNDS} rounds of the {concurrency}-request batch simulated "
                         f"({MAX_ROUNDS * concurrency} of {n} prompts: a trace of all of them "
                         f"would not fit in this machine's memory)")
            return MAX_ROUNDS * concurrency
        return n
    if "rounds x concurrency" in text and concurrency is not None:
        return int(first_number(text)) * concurrency
    if "default" in text:
        return int(first_number(text.split("default", 1)[1]))
    if concurrency is not None:
        notes.append(f"num_prompts {text!r}: {MAX_ROUNDS} rounds of the {concurrency}-request "
                     f"closed loop")
        return MAX_ROUNDS * concurrency
    notes.append(f"num_prompts {text!r}: {LOADGEN_PROMPTS}")
    return LOADGEN_PROMPTS


def first_number(text: str) -> int:
    match = re.search(r"\d+", text)
    if match is None:
        raise Refused(f"no number in {text!r}")
    return int(match.group())
