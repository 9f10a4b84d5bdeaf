"""`batchtwin prefix-reuse`: serve a seeded shared-prefix workload through the spec's KV
memory (request rows, paged KV allocator, radix cache) and report how much prefill the
prefix cache saves. No model runs: output tokens are drawn from a seeded generator.

Requests are served in waves of `--concurrency`: the wave is prefilled together, decodes
together for `--output-len` steps, and finishes; the radix cache carries over.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import numpy as np

from experiments.cli.arg_types import non_negative_int, positive_int, seed
from shared import Req, SamplingParams
from shared.memory.kv_memory import KVCacheOOMError, KVMemory

HELP = "serve a synthetic shared-prefix workload through the KV memory and report cache reuse"
NON_NEGATIVE = frozenset({"system_len", "question_len"})  # every other int flag is >= 1


@dataclass(frozen=True)
class PrefixReuseConfig:
    groups: int = 4
    prompts_per_group: int = 16
    system_len: int = 256
    question_len: int = 32
    output_len: int = 16
    concurrency: int = 8
    kv_tokens: int = 4096
    page_size: int = 1
    vocab_size: int = 32000
    disable_radix_cache: bool = False
    seed: int = 0


def configure(parser: argparse.ArgumentParser) -> None:
    for name, default in asdict(PrefixReuseConfig()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=_flag_type(name), default=default,
                                help=f"default: {default}")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _flag_type(name: str):
    """The argparse type of an int field: a seed, a length that may be 0, or a count >= 1."""
    if name == "seed":
        return seed
    return non_negative_int if name in NON_NEGATIVE else positive_int


def run(args: argparse.Namespace) -> int:
    fields = PrefixReuseConfig.__dataclass_fields__
    config = PrefixReuseConfig(**{k: v for k, v in vars(args).items() if k in fields})
    try:
        result = serve(config)
    except KVCacheOOMError as e:
        # NOTE: no admission control here, so a pool too small is bad input, not a bug
        raise ValueError(f"{e} (a wave of --concurrency {config.concurrency} requests must "
                         f"fit in --kv-tokens {config.kv_tokens})") from e
    if args.json:
        print(json.dumps({"config": asdict(config), "result": result}, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    return 0


def make_requests(c: PrefixReuseConfig, rng: np.random.Generator) -> list[Req]:
    systems = rng.integers(0, c.vocab_size, size=(c.groups, c.system_len))
    params = SamplingParams(max_new_tokens=c.output_len, ignore_eos=True)
    reqs = []
    for i in range(c.groups * c.prompts_per_group):
        question = rng.integers(0, c.vocab_size, size=c.question_len)
        prompt = np.concatenate((systems[i % c.groups], question)).tolist()
        reqs.append(Req(f"r{i}", prompt, params))
    return reqs


def serve(c: PrefixReuseConfig) -> dict[str, float | int | str]:
    rng = np.random.default_rng(c.seed)
    mem = KVMemory.build(max_running_requests=c.concurrency,
                         max_context_len=c.system_len + c.question_len + c.output_len,
                         max_total_tokens=c.kv_tokens, page_size=c.page_size,
                         disable_radix_cache=c.disable_radix_cache)
    reqs = make_requests(c, rng)
    cached = 0
    for start in range(0, len(reqs), c.concurrency):
        wave = reqs[start : start + c.concurrency]
        cached += _prefill(mem, wave, rng, c.vocab_size)
        for _ in range(c.output_len - 1):
            _decode(mem, wave, rng, c.vocab_size)
        for r in wave:
            mem.release_kv_cache(r)
        mem.check_integrity()
    mem.check_idle()
    prompt_tokens = sum(len(r.origin_input_ids) for r in reqs)
    return {"requests": len(reqs), "prompt_tokens": prompt_tokens, "cached_tokens": cached,
            "prefill_saved": f"{cached / prompt_tokens:.1%}",
            "cache_resident_tokens": mem.tree_cache.evictable_size(), "idle_check": "passed"}


def _prefill(mem: KVMemory, wave: list[Req], rng: np.random.Generator, vocab: int) -> int:
    """Prefill the wave together; returns the prompt tokens served from the cache."""
    for r in wave:
        r.init_next_round_input(mem.tree_cache)
        mem.tree_cache.inc_lock_ref(r.last_node)
    hits = sum(len(r.prefix_indices) for r in wave)
    mem.alloc_for_extend(wave)
    for r in wave:
        r.kv_committed_len = len(r.fill_ids)
        r.output_ids.append(int(rng.integers(vocab)))
        mem.tree_cache.cache_unfinished_req(r)
    return hits


def _decode(mem: KVMemory, wave: list[Req], rng: np.random.Generator, vocab: int) -> None:
    seq = np.array([r.kv_committed_len for r in wave], dtype=np.int64)
    mem.alloc_for_decode([r.req_pool_idx for r in wave], seq)
    for r in wave:
        r.kv_committed_len += 1
        r.output_ids.append(int(rng.integers(vocab)))
