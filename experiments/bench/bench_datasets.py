"""The prompts `batchtwin bench serve --dataset-name` sends, as text, with their send times.

Each dataset is one of the spec's workload generators (`shared.workload.registry`) over a
vocabulary of 26**3 three-letter words; token id `i` becomes the word for `i` plus a space,
so a prompt of N tokens is N words of four characters: N tokens for batchtwin's placeholder
codec, about two each for a BPE tokenizer such as SmolLM2's. Prompts that share a token
prefix share that text prefix, so a server's prefix cache sees the sharing the workload has.

- `random`: `--random-input-len` tokens in, `--random-output-len` out, every request alike,
  or with vLLM's `--random-range-ratio R` each length uniform in [len x (1 - R), len x (1 + R)];
- `sharegpt-like`: lengths lognormal with medians 200 in and out, sigma 1, each clipped to
  1024 (`ShareGPTLike`: ShareGPT's shape without its text); `--sharegpt-output-len`
  fixes the output length instead, as vLLM's flag does;
- `shared-prefix`: SGLang's `generated-shared-prefix` (`--gsp-num-groups` groups of
  `--gsp-prompts-per-group` prompts, each a group's `--gsp-system-prompt-len`-token system
  prompt plus its own `--gsp-question-len`-token question, `--gsp-output-len` tokens out;
  `--num-prompts` is ignored: the groups make the count, as in SGLang's bench_serving).

Arrivals follow `--request-rate` and `--burstiness` from `--seed` in every dataset.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import TYPE_CHECKING

from experiments.cli.arg_types import fraction, positive_int
from shared.workload.length_dist import Uniform
from shared.workload.shared_prefix import SharedPrefix
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.synthetic import Synthetic
from shared.workload.workload import Workload

if TYPE_CHECKING:
    from experiments.bench.serve_bench import Sent

DATASETS = ("random", "sharegpt-like", "shared-prefix")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOCAB = len(LETTERS) ** 3


def add_dataset_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset-name", choices=DATASETS, default="random")
    p.add_argument("--random-input-len", type=positive_int, default=1024)
    p.add_argument("--random-output-len", type=positive_int, default=128)
    p.add_argument("--random-range-ratio", type=fraction, default=0.0)
    p.add_argument("--sharegpt-output-len", type=positive_int, default=None)
    p.add_argument("--gsp-num-groups", type=positive_int, default=64)
    p.add_argument("--gsp-prompts-per-group", type=positive_int, default=16)
    p.add_argument("--gsp-system-prompt-len", type=positive_int, default=2048)
    p.add_argument("--gsp-question-len", type=positive_int, default=128)
    p.add_argument("--gsp-output-len", type=positive_int, default=256)


def dataset_requests(args: argparse.Namespace) -> list[Sent]:
    """The requests `args.dataset_name` describes, in send order."""
    return workload_requests(_workload(args))


def random_requests(args: argparse.Namespace) -> list[Sent]:
    """`--dataset-name random`: reads num_prompts, request_rate, burstiness, seed,
    random_input_len, random_output_len and random_range_ratio."""
    return workload_requests(_random(args))


def workload_requests(workload: Workload) -> list[Sent]:
    """Each request of `workload` as text (`word` per token), its max_tokens and arrival."""
    from experiments.bench.serve_bench import Sent  # NOTE: asyncio, loaded when requests are made

    ordered = sorted(workload, key=lambda w: w.arrival_time)
    return [Sent("".join(word(t) for t in w.input_ids), w.sampling_params.max_new_tokens,
                 float(w.arrival_time)) for w in ordered]


def word(token_id: int) -> str:
    """Token id -> its three-letter word and a space (four characters)."""
    i = int(token_id) % VOCAB
    return LETTERS[i // 676] + LETTERS[i // 26 % 26] + LETTERS[i % 26] + " "


def _workload(args: argparse.Namespace) -> Workload:
    if args.dataset_name == "random":
        return _random(args)
    arrivals = _arrivals(args)
    if args.dataset_name == "sharegpt-like":
        w = ShareGPTLike(args.num_prompts).build(vocab_size=VOCAB, **arrivals)
        return w if args.sharegpt_output_len is None else _with_output_len(w, args.sharegpt_output_len)
    return SharedPrefix(args.gsp_num_groups, args.gsp_prompts_per_group,
                        args.gsp_system_prompt_len, args.gsp_question_len,
                        args.gsp_output_len).build(vocab_size=VOCAB, **arrivals)


def _random(args: argparse.Namespace) -> Workload:
    r = args.random_range_ratio
    return Synthetic(args.num_prompts, _around(args.random_input_len, r),
                     _around(args.random_output_len, r)).build(vocab_size=VOCAB, **_arrivals(args))


def _around(n: int, ratio: float) -> int | Uniform:
    """`n`, or with a range ratio the uniform lengths around it (vLLM's bounds)."""
    if ratio == 0:
        return n
    return Uniform(max(1, math.floor(n * (1 - ratio))), math.ceil(n * (1 + ratio)))


def _arrivals(args: argparse.Namespace) -> dict:
    return {"seed": args.seed, "rate": args.request_rate, "burstiness": args.burstiness}


def _with_output_len(w: Workload, n: int) -> Workload:
    reqs = tuple(dataclasses.replace(r, sampling_params=dataclasses.replace(
        r.sampling_params, max_new_tokens=n)) for r in w)
    return Workload(reqs, w.name, w.config)
